"""GPU health of a host, as the driver and nvidia-smi report it: what the host facts
read on a GPU host (infra/providers/hostfacts.py appends HEALTH_SCRIPT), so that a GPU
going bad is refused before a launch and is drift while training runs.

What each fact comes from (field names as `nvidia-smi --help-query-gpu` lists them):

- Xid errors: the driver's kernel log line `NVRM: Xid (PCI:<bus>): <code>, ...`
  (open-gpu-kernel-modules, kernel_rc.c `krcReportXid`), read with `dmesg` (or
  `journalctl -k -o short-monotonic` where dmesg is restricted), each with its
  seconds since boot. Only those after the last check count: the resource keeps a
  baseline (boot id and the newest Xid's time) from its last create or update.
  Codes an application causes (13, 31, 43, 45, 68, 109: the set NVIDIA's Kubernetes
  device plugin does not mark a GPU unhealthy for) are left out.
- `retired_pages.pending` / `remapped_rows.pending` `Yes`: memory the driver retires
  or remaps at the next GPU reset; until then the GPU runs with the bad memory.
- `remapped_rows.failure` `Yes`: the GPU ran out of spare rows: it must be replaced.
- `ecc.errors.uncorrected.volatile.total` above 0: uncorrected ECC errors since the
  driver loaded.
A field the GPU does not support prints `[N/A]` (or the whole query fails on an older
driver): it counts as healthy, not as a fault.

Each is a refusal and a drift property naming host and GPU; the remedy is the one the
stack supports (drain the host; the spare takes its place: infra/render/remedy.py).
A drained host carries no training task: its health is read, not judged, and its
baseline moves on, so a host brought back after repair starts from a clean log.
"""

from __future__ import annotations

import re
from typing import Any

HEALTH_SCRIPT = r"""echo "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
{ dmesg 2>/dev/null || journalctl -k -o short-monotonic --no-pager -q 2>/dev/null; } |
  grep 'NVRM: Xid' | tail -n 200 | sed 's/^/xid|/'
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending \
    --format=csv,noheader,nounits 2>/dev/null | sed 's/^/ecc|/'
  nvidia-smi --query-gpu=uuid,remapped_rows.pending,remapped_rows.failure \
    --format=csv,noheader,nounits 2>/dev/null | sed 's/^/remap|/'
fi
"""

HEALTH_KEYS = (
    "gpu_xid_errors",
    "gpus_retirement_pending",
    "gpus_remap_failed",
    "gpus_uncorrected_ecc",
)
# Xid codes an application's own fault raises (NVIDIA k8s-device-plugin
# internal/rm/health.go skips exactly these): not a sign of a sick GPU.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

_XID = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\].*NVRM: Xid \(PCI:([^)]*)\): (\d+)")


def _yes(v: str) -> bool:
    return v.strip().lower() == "yes"


def _count(v: str) -> int:
    v = v.strip()
    return int(v) if v.isdigit() else 0


def parse_health(text: str) -> dict[str, Any]:
    """HEALTH_SCRIPT's output: the boot id, the Xid lines (time since boot, PCI bus,
    code, the line), and per GPU its ECC count and pending/failed flags."""
    out: dict[str, Any] = {"boot_id": "", "xids": [], "gpus": {}}
    gpus: dict[str, dict[str, Any]] = out["gpus"]
    for line in text.splitlines():
        tag, _, rest = line.partition("|")
        if line.startswith("boot_id="):
            out["boot_id"] = line.partition("=")[2].strip()
        elif tag == "xid" and (m := _XID.match(rest)):
            out["xids"].append(
                {"ts": float(m.group(1)), "pci": m.group(2), "code": int(m.group(3)),
                 "line": rest.strip()[:300]}
            )  # fmt: skip
        elif tag in ("ecc", "remap"):
            cells = [c.strip() for c in rest.split(",")]
            if len(cells) != 3 or not cells[0]:
                continue
            g = gpus.setdefault(cells[0], {"ecc": 0, "pending": False, "remap_failed": False})
            if tag == "ecc":
                g["ecc"] = _count(cells[1])
                g["pending"] = g["pending"] or _yes(cells[2])
            else:
                g["pending"] = g["pending"] or _yes(cells[1])
                g["remap_failed"] = _yes(cells[2])
    return out


def new_xids(health: dict[str, Any], baseline: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The Xid lines after the baseline (all of this boot's without one, or after a
    reboot), application-caused codes left out."""
    after = -1.0
    if baseline and baseline.get("boot_id") == health.get("boot_id"):
        after = float(baseline.get("xid_ts", -1.0))
    return [
        x for x in health.get("xids", []) if x["ts"] > after and x["code"] not in APPLICATION_XIDS
    ]


def baseline_of(health: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """The baseline after a check: this boot, and the newest Xid line it has seen."""
    xids = health.get("xids", [])
    newest = max((x["ts"] for x in xids), default=-1.0)
    if old and old.get("boot_id") == health.get("boot_id"):
        newest = max(newest, float(old.get("xid_ts", -1.0)))
    return {"boot_id": health.get("boot_id", ""), "xid_ts": newest}


def seen_health(health: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The health facts in the shape of `expected` (empty lists when healthy)."""
    gpus: dict[str, dict[str, Any]] = health.get("gpus", {})
    return {
        "gpu_xid_errors": sorted({x["code"] for x in new_xids(health, baseline)}),
        "gpus_retirement_pending": sorted(u for u, g in gpus.items() if g["pending"]),
        "gpus_remap_failed": sorted(u for u, g in gpus.items() if g["remap_failed"]),
        "gpus_uncorrected_ecc": sorted(u for u, g in gpus.items() if g["ecc"] > 0),
    }


def health_problem(
    host: str,
    key: str,
    health: dict[str, Any],
    baseline: dict[str, Any] | None,
    remedy: str,
) -> str:
    """The sentence for one unhealthy fact: host, GPU(s), what the tool said, remedy."""
    gpus: dict[str, dict[str, Any]] = health.get("gpus", {})
    what = seen_health(health, baseline)[key]
    if key == "gpu_xid_errors":
        first = new_xids(health, baseline)[0]["line"]
        text = (
            f"GPU Xid error(s) {', '.join(map(str, what))} in the kernel log since the last "
            f"check (`{first}`): the GPU needs a reset or service"
        )
    elif key == "gpus_retirement_pending":
        text = (
            f"GPU {', '.join(what)} has memory pending retirement or remap "
            "(nvidia-smi retired_pages.pending / remapped_rows.pending: Yes): it takes "
            "effect at the next GPU reset"
        )
    elif key == "gpus_remap_failed":
        text = (
            f"GPU {', '.join(what)} ran out of spare rows (remapped_rows.failure: Yes): "
            "the GPU must be replaced"
        )
    else:
        counts = ", ".join(f"{u}: {gpus[u]['ecc']}" for u in what)
        text = (
            f"uncorrected ECC errors since the driver loaded "
            f"(ecc.errors.uncorrected.volatile.total {counts})"
        )
    return f"host {host}: {text}; remedy: {remedy}" if remedy else f"host {host}: {text}"
