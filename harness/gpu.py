"""What scripts/gpu-check carries to a GPU host (docs/gpu.md): the host script the
providers send, rendered here, where the Pulumi SDK is; the GPU host's python has
torch and nvidia-smi but not the SDK, so tests/gpu runs the rendered text.

    python -m harness.gpu host-script > .gpu/host-script.sh
"""

from __future__ import annotations

import sys

# The NIC is the GPU host's, unknown here: scripts/gpu-check puts its default route's
# interface in its place.
NIC_PLACEHOLDER = "@NIC@"

# Every reading a production host can be asked for except the fabric (a host without
# an RDMA device has no `rdma`) and the peers (no peers there): facts, GPU health, the
# NIC's link and DCGM's level-1 diagnostic.
GPU_HOST_PROPS = {
    "nic": NIC_PLACEHOLDER,
    "expected": {},
    "gpu_health": True,
    "nic_health": {"min_speed_Mbps": 1},
    "dcgm_level": 1,
}


def host_script() -> str:
    """The script HostFacts sends to a GPU host with GPU_HOST_PROPS."""
    from infra.providers.hostfacts import host_script as render

    return render(GPU_HOST_PROPS)


def main(argv: list[str]) -> int:
    if argv != ["host-script"]:
        print("usage: python -m harness.gpu host-script", file=sys.stderr)
        return 2
    sys.stdout.write(host_script())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
