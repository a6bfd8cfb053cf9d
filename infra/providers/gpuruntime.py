"""Whether a host's NVIDIA container toolkit honours Swarm's GPU assignment.

Swarm hands a task its GPUs in `DOCKER_RESOURCE_NVIDIA-GPU`. Which code reads it
depends on the toolkit's version and on the runtime's `mode` (what the upstream
sources say, NVIDIA/nvidia-container-toolkit, tags v1.17.9, v1.18.2, v1.19.0):

- `mode` is `[nvidia-container-runtime] mode` in the runtime's config.toml
  (internal/config/runtime.go `Mode string toml:"mode"`), default `"auto"`
  (internal/config/config.go GetDefault); one of legacy, csv, cdi, jit-cdi.
- `auto` resolves to `legacy` up to 1.17 (v1.17.9 internal/info/auto.go) and to
  `jit-cdi` from 1.18.0-rc.1 on (v1.18.2 internal/info/auto.go: `defaultMode:
  JitCDIRuntimeMode`; `cdi` only for images that request fully qualified CDI
  devices, `csv` on Tegra, neither of which this project's tasks are).
- Up to 1.18 only the `nvidia-container-runtime-hook` reads `swarm-resource`
  (v1.18.2 cmd/nvidia-container-runtime-hook/hook_config.go
  getSwarmResourceEnvvars); the hook runs in `legacy` mode only. In every other
  mode the runtime builds the device list from NVIDIA_VISIBLE_DEVICES alone, so
  every task sees every GPU: NVIDIA/nvidia-container-toolkit#1599, fixed by #1600
  in 1.19.0 (v1.19.0 internal/runtime/runtime_factory.go passes
  `WithPreferredVisibleDevicesEnvVars(cfg.SwarmResource)` in all modes; first in
  1.19.0-rc.2, never backported to 1.18.x).

So a toolkit isolates GPUs under Swarm when it is >= 1.19.0 or runs in legacy
mode. The version is read from `nvidia-ctk --version` (same package and build
stamp as nvidia-container-runtime: packaging/debian/nvidia-container-toolkit-base
.install; urfave/cli prints `NVIDIA Container Toolkit CLI version 1.18.2`), the
mode from `nvidia-ctk config` (since 1.14.0; it prints the config.toml the runtime
reads, config.GetConfigFilePath). No nvidia-ctk (it ships since 1.10.0) means
no verdict: nothing is refused that the tool cannot show to be broken.
"""

from __future__ import annotations

from typing import Any

from infra.versions import release_key

# Appended to the host facts script (infra/providers/hostfacts.py FACTS_SCRIPT,
# which is str.format()ed: no braces here). Prints nothing unless nvidia-ctk
# reports a version, so hosts without the tool report no toolkit facts at all.
TOOLKIT_SCRIPT = r"""if command -v nvidia-ctk >/dev/null 2>&1; then
  ctk=$(nvidia-ctk --version 2>/dev/null | sed -n 's/^.* version \([0-9][^ ]*\)$/\1/p' | head -n1)
  if [ -n "$ctk" ]; then
    echo "toolkit_version=$ctk"
    m='s/^[[:space:]]*mode[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p'
    sec='/^\[nvidia-container-runtime\]/,/^\[/'
    echo "toolkit_mode=$(nvidia-ctk config 2>/dev/null | sed -n "$sec$m" | head -n1)"
  fi
fi
"""

CONFIG_TOML = "/etc/nvidia-container-runtime/config.toml"
# The first release whose runtime reads swarm-resource in every mode (#1600).
FIXED_IN = "1.19.0"
# The first minor whose `auto` mode is jit-cdi (the default changed in 1.18.0-rc.1).
JIT_CDI_DEFAULT_SINCE = (1, 18)
ISSUE = "NVIDIA/nvidia-container-toolkit#1599"


def effective_mode(version: str, mode: str) -> str:
    """The mode the runtime runs in: config.toml's `mode`, `auto` (or unset) resolved
    as the toolkit of that version resolves it on a discrete-GPU host."""
    if mode and mode != "auto":
        return mode
    return "jit-cdi" if release_key(version)[0][:2] >= JIT_CDI_DEFAULT_SINCE else "legacy"


def runtime_isolates(observed: dict[str, Any]) -> bool:
    """False only for a toolkit known to ignore Swarm's assignment: older than 1.19.0
    and not in legacy mode. True where nvidia-ctk reported nothing (no verdict)."""
    version = observed.get("toolkit_version") or ""
    if not version:
        return True
    if release_key(version) >= release_key(FIXED_IN):
        return True
    return effective_mode(version, observed.get("toolkit_mode") or "") == "legacy"


def runtime_problem(host: str, observed: dict[str, Any]) -> str:
    """The preflight's sentence for a toolkit that does not isolate GPUs."""
    version = observed.get("toolkit_version") or ""
    mode = observed.get("toolkit_mode") or ""
    runs = effective_mode(version, mode)
    if mode and mode != "auto":
        why = "as config.toml sets"
    else:
        minor = ".".join(str(n) for n in release_key(version)[0][:2])
        said = "mode 'auto'" if mode else "no mode (the default, 'auto')"
        why = f"config.toml sets {said}, which {minor} resolves to {runs}"
    return (
        f"host {host}: tasks would see every GPU: NVIDIA container toolkit {version} runs "
        f"in mode {runs!r} ({why}), which ignores Swarm's GPU assignment ({ISSUE}); set "
        f'mode = "legacy" under [nvidia-container-runtime] in {CONFIG_TOML}, or install '
        f"toolkit >= {FIXED_IN}"
    )
