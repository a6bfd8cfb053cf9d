"""The health of a host's NIC (its `nic`, the one the data plane and the overlay use),
as the kernel reports it: what the host facts read where `preflight.nic` asks for it
(infra/providers/hostfacts.py appends NIC_SCRIPT), so that a link that came up slow or
counts errors is refused before a launch and is drift while training runs.

What each fact comes from (the kernel's netdev sysfs ABI, Documentation/ABI/testing/
sysfs-class-net and sysfs-class-net-statistics):

- `/sys/class/net/<nic>/speed`: the negotiated speed in Mb/s; -1 (or a read error)
  when the link is down or the driver does not say. A 100 Gb/s port that came up at
  25 Gb/s (a bad cable or transceiver, a switch port pinned) trains at the speed of
  that host: the whole job does.
- `statistics/rx_errors`, `rx_crc_errors`, `tx_errors` and `carrier_changes`: counters
  since the driver loaded. A cable with errors drops frames; every drop is a
  retransmission that stalls the collective. Only what they grew by since the last
  check counts: the resource keeps a baseline (boot id and the counters) from its last
  create or update. The first check, and the first after a reboot (another boot id),
  only take the baseline: counts since boot hold the link coming up (carrier changes)
  and errors of unknown age. A counter below its baseline (the driver reloaded) counts
  from zero.
  `rx_errors` includes the CRC errors on most drivers and not on some: the larger of the
  two counts.

Each is a refusal and a drift property naming host, NIC and figures; the remedy is the
one the stack supports (infra/render/remedy.py). As with GPU health, a drained host is
read, not judged, and its baseline moves on.
"""

from __future__ import annotations

from typing import Any

# str.format()ed with {nic}. Every line is prefixed: nothing else can pass for it.
NIC_SCRIPT = r"""echo "nic|boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "nic|speed=$(cat /sys/class/net/{nic}/speed 2>/dev/null)"
for c in rx_errors rx_crc_errors tx_errors; do
  echo "nic|$c=$(cat /sys/class/net/{nic}/statistics/$c 2>/dev/null)"
done
echo "nic|carrier_changes=$(cat /sys/class/net/{nic}/carrier_changes 2>/dev/null)"
"""

NIC_KEYS = ("nic_speed_meets_minimum", "nic_link_errors")
COUNTERS = ("rx_errors", "rx_crc_errors", "tx_errors", "carrier_changes")


def nic_expected(limits: dict[str, Any]) -> dict[str, Any]:
    """What a healthy NIC's facts are for the limits set (the `expected` values, in the
    shape seen_nic reports): none without limits."""
    exp: dict[str, Any] = {}
    if limits.get("min_speed_Mbps") is not None:
        exp["nic_speed_meets_minimum"] = True
    if limits.get("max_errors") is not None:
        exp["nic_link_errors"] = {}
    return exp


def parse_nic(text: str) -> dict[str, Any]:
    """NIC_SCRIPT's output: boot id, speed in Mb/s (-1: down or not reported) and the
    counters (a counter the driver does not have is left out)."""
    out: dict[str, Any] = {"boot_id": "", "speed_Mbps": -1, "counters": {}}
    for line in text.splitlines():
        tag, _, rest = line.partition("|")
        if tag != "nic":
            continue
        key, _, value = rest.partition("=")
        value = value.strip()
        if key == "boot_id":
            out["boot_id"] = value
        elif key == "speed":
            out["speed_Mbps"] = int(value) if value.lstrip("-").isdigit() else -1
        elif key in COUNTERS and value.isdigit():
            out["counters"][key] = int(value)
    return out


def grown(nic: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, int]:
    """What each counter grew by since the baseline, only those that grew: none without
    a baseline of this boot (the first check, a reboot), from zero for a counter that
    went back."""
    if not baseline or baseline.get("boot_id") != nic.get("boot_id"):
        return {}
    before: dict[str, int] = baseline.get("counters", {})
    out: dict[str, int] = {}
    for key, now in nic.get("counters", {}).items():
        was = before.get(key, 0)
        delta = now - was if now >= was else now
        if delta > 0:
            out[key] = delta
    return out


def error_count(increase: dict[str, int]) -> int:
    """The errors counted in an increase: rx (CRC included, counted once), tx and
    carrier changes (each a link going down or up)."""
    rx = max(increase.get("rx_errors", 0), increase.get("rx_crc_errors", 0))
    return rx + increase.get("tx_errors", 0) + increase.get("carrier_changes", 0)


def nic_baseline_of(nic: dict[str, Any]) -> dict[str, Any]:
    """The baseline after a check: this boot and the counters now."""
    return {"boot_id": nic.get("boot_id", ""), "counters": dict(nic.get("counters", {}))}


def seen_nic(
    nic: dict[str, Any], limits: dict[str, Any], baseline: dict[str, Any] | None
) -> dict[str, Any]:
    """The NIC facts in the shape of `expected` (only those `limits` set): the speed
    meets the minimum; the counters that grew, where their errors exceed the limit
    (empty: within it)."""
    seen: dict[str, Any] = {}
    if limits.get("min_speed_Mbps") is not None:
        seen["nic_speed_meets_minimum"] = nic.get("speed_Mbps", -1) >= limits["min_speed_Mbps"]
    if limits.get("max_errors") is not None:
        increase = grown(nic, baseline)
        seen["nic_link_errors"] = increase if error_count(increase) > limits["max_errors"] else {}
    return seen


def nic_problem(
    host: str,
    nic_name: str,
    key: str,
    nic: dict[str, Any],
    limits: dict[str, Any],
    baseline: dict[str, Any] | None,
    remedy: str,
) -> str:
    """The sentence for one unhealthy NIC fact: host, NIC, the figures, the remedy."""
    if key == "nic_speed_meets_minimum":
        speed = nic.get("speed_Mbps", -1)
        said = f"{speed} Mb/s" if speed >= 0 else "no speed (link down or not reported)"
        text = (
            f"NIC {nic_name} negotiated {said}, under preflight.nic.min_speed_Mbps "
            f"{limits['min_speed_Mbps']}: a cable, transceiver or switch port that came up "
            "slow; the job would run at this host's pace"
        )
    else:
        increase = grown(nic, baseline)
        counts = ", ".join(f"{k} +{v}" for k, v in sorted(increase.items()))
        text = (
            f"NIC {nic_name} counted {error_count(increase)} link error(s) since the last "
            f"check ({counts}), over preflight.nic.max_errors {limits['max_errors']}: a "
            "cable or port with errors (each drop stalls the collective)"
        )
    return f"host {host}: {text}; remedy: {remedy}" if remedy else f"host {host}: {text}"
