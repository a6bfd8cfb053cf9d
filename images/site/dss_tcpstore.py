"""Run at interpreter start by dss_tcpstore.pth in the image venv's site-packages.

Debian's torch is built without libuv, and a TCPStore asks for libuv unless told not to.
torchrun's workers join the agent's store through a TCPStore that
torch.distributed.rendezvous makes without `use_libuv` (its agent-store branch), so the
image's USE_LIBUV=0 never reaches it: an unmodified DDP script run by torchrun fails in
`init_process_group` with "use_libuv was requested but PyTorch was build without libuv
support". The project's train.py patches this in its own process and the image's
torchrun wrapper in the agent; this does it for any script a torchrun worker runs.

Only in a torchrun worker (TORCHELASTIC_USE_AGENT_STORE is set by the agent) with
USE_LIBUV=0, and only once the script imports torch.distributed.rendezvous: a .pth runs
before the system's site-packages (where Debian's torch is) are on sys.path, so the
patch waits for that import instead of making it. Every other interpreter gets nothing.
"""

import os
import sys

TARGET = "torch.distributed.rendezvous"


def _classic_store_by_default(rdzv):  # type: ignore[no-untyped-def]
    base = rdzv.TCPStore

    class TCPStore(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    rdzv.TCPStore = TCPStore


class _AfterRendezvous:
    """A meta path finder that finds nothing itself: when TARGET is imported it lets the
    other finders find it and patches the module right after it has run."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        finders = [f for f in sys.meta_path if hasattr(f, "find_spec")]
        spec = next(
            (s for s in (f.find_spec(name, path, target) for f in finders) if s and s.loader),
            None,
        )
        if spec is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            run(module)
            _classic_store_by_default(module)

        spec.loader.exec_module = exec_module
        return spec

if os.environ.get("USE_LIBUV") == "0" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE"):
    sys.meta_path.insert(0, _AfterRendezvous())
