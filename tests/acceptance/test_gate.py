"""The collective gate and GPU health under the real engine on a 3-host lab (issue
21): one lab host's link shaped with `tc` (netem, or tbf where the kernel has no
netem) fails the gate before the launch, naming that host, its pairs' figures and the
remedy; then a faked Xid line and a faked retired page on another host are drift on
its facts and refuse the next `up --refresh`, naming host, GPU and remedy; no training
process starts; with the link and the GPU repaired the next `pulumi up` passes the
gate and training starts.

Three hosts, not the dev stack's two: with two hosts the one slow pair cannot say
which of the two is slow (infra/render/gate.py `localise`). Costs one 3-host lab, two
`up`s (one refused) and a destroy.

In the acceptance suite, not the test command (it was tests/engine/test_gate.py, 2.1
min there, a 3-host lab of its own; issue 43): every dev stack of the test command
passes the gate before its launch (Pulumi.dev.yaml preflight.gate), the slow host's
localisation is under unit tests (tests/unit/infra/render), and an Xid line and a
retired page read as drift against the lab's fakes in tests/lab/test_infra_health.py;
the shaped link refused by name and the sick GPU refused under the engine run here."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.configs import dev_on_hosts
from harness.lab import logged_steps, shape_link, unshape_link
from harness.stack import Stack
from harness.waits import wait_for
from lab import config as c
from lab import hostfiles as hf
from tests.engine.conftest import MakeStack, lab_of

pytestmark = pytest.mark.acceptance

RUN = "gatetest"
SLOW = 3
"""The lab host whose link is shaped."""
RATE = "40mbit"
"""5 MB/s: a quarter of the dev floor (Pulumi.dev.yaml preflight.gate.min_busbw_MBps 20)."""
SICK = 2
"""The lab host whose GPU goes bad."""
SICK_GPU = c.gpu_uuids(SICK, 2)[1]


def sick_paths() -> c.HostPaths:
    """Where the fake dmesg and nvidia-smi of the sick host read their faults."""
    return c.LabPaths(c.lab_root()).host(SICK)


def heal() -> None:
    """The sick host's GPU repaired: no Xid in the kernel log, no page pending."""
    sick_paths().kernel_log.unlink(missing_ok=True)
    sick_paths().gpu_health.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[dict[str, Any]]:
    """A 3-host lab with 2 fake GPUs each, no link shaped after the module."""
    with lab_of(3) as status:
        try:
            yield status
        finally:
            unshape_link(SLOW)
            heal()


@pytest.fixture(scope="module")
def stack(lab: dict[str, Any], make_stack: MakeStack) -> Stack:
    config = dev_on_hosts(3, 2, run_name=RUN, steps=400, checkpoint_every=50)
    s: Stack = make_stack("test-gate", config, {"wandb_api_key": "gate-test-not-a-key"})
    return s


def test_slow_host_is_refused_by_name_and_nothing_is_launched(stack: Stack) -> None:
    """With lab-h3's link at 40 Mbit/s, `up` fails at the gate naming lab-h3, its pairs'
    figures and the remedy; the launch does not start."""
    qdisc = shape_link(SLOW, RATE)
    start = time.monotonic()
    res = stack.pulumi("up", "--yes", "--skip-preview", check=False)
    took = time.monotonic() - start
    out = res.stdout + res.stderr
    print(f"\nup with lab-h{SLOW} shaped ({qdisc}): exit {res.returncode} after {took:.0f}s")
    print(
        "\n".join(
            ln
            for ln in out.splitlines()
            if "gate" in ln or "pair" in ln or "slow" in ln or "remedy" in ln
        )
    )
    assert res.returncode != 0
    assert "collective gate failed: bus bandwidth" in out
    assert f"slow host(s): lab-h{SLOW} (every pair of theirs was slow)" in out
    assert f"remedy for lab-h{SLOW}: set hosts[{SLOW - 1}].availability: drain" in out
    assert "pair lab-h1 <-> lab-h2" in out and "(at or over the floor 20)" in out
    state = json.loads(stack.pulumi("stack", "export", record=False).stdout)
    names = {r["urn"].rsplit("::", 1)[1] for r in state["deployment"].get("resources") or []}
    assert not names & {"test-gate-launch-run", "test-gate-launch-run-state"}, names
    assert not logged_steps(RUN), "a step was logged: the launch started past a failed gate"


def test_sick_gpu_is_drift_and_refused_by_name(stack: Stack) -> None:
    """An Xid 79 line and a page pending retirement on lab-h2 are drift on its facts
    (`refresh --preview-only --expect-no-changes --diff` names both properties), and `up
    --refresh` refuses naming host, code, GPU and remedy; the launch does not start."""
    sick_paths().kernel_log.write_text(hf.xid_line(4321.0, 79))
    sick_paths().gpu_health.write_text(f"{SICK_GPU} 0 Yes No No\n")
    check = stack.pulumi("refresh", "--preview-only", "--expect-no-changes", "--diff", check=False)
    out = check.stdout + check.stderr
    assert check.returncode != 0, f"the sick GPU was not drift:\n{out[-3000:]}"
    facts = f"test-gate-facts-lab-h{SICK}"
    assert facts in out and "gpu_xid_errors" in out and "gpus_retirement_pending" in out, out
    res = stack.pulumi("up", "--refresh", "--yes", "--skip-preview", check=False)
    out = res.stdout + res.stderr
    print("\n".join(ln for ln in out.splitlines() if f"host lab-h{SICK}:" in ln))
    assert res.returncode != 0
    assert f"host lab-h{SICK}: GPU Xid error(s) 79 in the kernel log since the last check" in out
    assert f"host lab-h{SICK}: GPU {SICK_GPU} has memory pending retirement" in out
    assert f"remedy: set hosts[{SICK - 1}].availability: drain" in out
    assert not logged_steps(RUN), "a step was logged: the launch started on a sick GPU"


def test_repaired_link_passes_the_gate_and_training_starts(stack: Stack) -> None:
    """The link and the GPU repaired, `up` passes the gate (its figures in the `gate`
    output) and the run's first step follows; the next preview is a no-op."""
    unshape_link(SLOW)
    heal()
    start = time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    gate = stack.outputs()["gate"]
    print(
        f"\ngate: {gate['state']}, {gate['busbw_MBps']} MB/s at the largest size in "
        f"{gate['seconds']} s; figures {gate['figures']}"
    )
    assert gate["state"] == "passed"
    assert gate["busbw_MBps"] >= 20
    assert [f["bytes"] for f in gate["figures"]] == [1 << 20, 4 << 20]
    step = wait_for("the first step", lambda: min(logged_steps(RUN), default=None), 300, 1)
    print(f"first step {step} logged {time.monotonic() - start:.0f}s after `up` started")
    stack.pulumi("preview", "--expect-no-changes")
