"""CollectiveGate: the all-reduce across every training task, between the services and
the launch (dynamic provider; the pure half is infra/render/gate.py).

Create and update run `dss_train.collective` in every task at once through each host's
Docker API (the tasks' own data plane: the overlay, or the host network with the
stack's NIC) and refuse, so that the launch, which depends on this resource, never
starts, when the bus bandwidth at the largest size is under
`preflight.gate.min_busbw_MBps` or the sum is wrong. On a refusal it measures pairs of
hosts and names the slow ones, with the remedy the stack supports.

- Its inputs hold the roster's task ids: new tasks (an update, a moved task) are
  measured again before the launch starts in them; the same tasks are not.
- Read returns the recorded result and measures nothing: an all-reduce beside a
  running job would measure the job's traffic and slow it down. A host going bad
  while training runs is the host facts' to report (infra/providers/health.py).
- A run already alive in the tasks (the program upgraded under a live stack, which
  creates this resource) is `skipped`: the gate is a check before a launch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from infra.layout import TRAIN_UID
from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import service_container, ssh_of
from infra.render.gate import (
    GATE_OUTPUTS,
    GateResult,
    collective_script,
    failure_message,
    largest,
    last_words,
    localise,
    pair_rounds,
    parse_figures,
    ring_verdict,
    run_failure,
)

# Changed, these mean a new measurement: other tasks, or another floor or method.
GATE_KEYS = ("tasks", "min_busbw_MBps", "sizes", "iters", "port")

# `sh -c` in the master task: exits 0 while a process whose command line holds $PAT (the
# training script) runs. The pattern comes through the environment, so pgrep's own
# command line does not hold it. Sent when the gate measures, never stored.
TRAINING_RUNNING_SCRIPT = 'pgrep -f "$PAT" >/dev/null'


def _run_group(props: dict[str, Any], group: Sequence[dict[str, Any]]) -> tuple[int, str]:
    """The all-reduce over `group` (roster entries; the first is rank 0), one exec per
    task at once: rank 0's exit status and output (another rank's on its failure)."""
    addresses = [t["address"] for t in group]

    def one(task: dict[str, Any]) -> tuple[int, str]:
        ctr = service_container(
            props["host_endpoints"][task["node"]],
            task["service"],
            ssh=ssh_of(props, props["host_endpoints"][task["node"]]),
        )
        if ctr is None:
            return 1, f"no running task of {task['service']} on {task['node']}"
        script = collective_script(
            addresses, task["address"], props["port"], props["sizes"], props["iters"]
        )
        res = ctr.exec_run(["sh", "-c", script], user=TRAIN_UID)
        out = res.output.decode(errors="replace") if isinstance(res.output, bytes) else ""
        return int(res.exit_code or 0), out

    with ThreadPoolExecutor(max_workers=len(group)) as pool:
        results = list(pool.map(one, group))
    if all(rc == 0 for rc, _ in results):
        return results[0]
    # Failed: every failed rank's own words, each naming its host, rank 0's figures
    # (if any) after them.
    words = [
        f"rank {r} ({t['node']}): {run_failure(rc, out)}"
        for r, (t, (rc, out)) in enumerate(zip(group, results, strict=True))
        if rc != 0
    ]
    rc = next(rc for rc, _ in results if rc != 0)
    return rc, "\n".join([results[0][1], *words])


def failed_ranks(text: str) -> str:
    """The `rank N (host): why` lines of a failed group's output, joined."""
    lines = [ln for ln in text.splitlines() if ln.startswith("rank ")]
    return "; ".join(lines) or last_words(text)


def _figure_of(rc: int, text: str) -> tuple[float, str]:
    """A pair's bus bandwidth at the largest size, or 0 and why its run failed."""
    figures = parse_figures(text)
    if rc != 0:
        return 0.0, failed_ranks(text)
    top = largest(figures)
    if top is None or not all(f.sum_ok for f in figures):
        return 0.0, ring_verdict(figures, 0.0)
    return top.busbw_mbps, ""


def _training_running(props: dict[str, Any]) -> bool:
    master = props["tasks"][0]
    ctr = service_container(
        props["host_endpoints"][master["node"]],
        master["service"],
        ssh=ssh_of(props, props["host_endpoints"][master["node"]]),
    )
    if ctr is None:
        return False
    res = ctr.exec_run(["sh", "-c", TRAINING_RUNNING_SCRIPT], environment={"PAT": props["script"]})
    return bool(res.exit_code == 0)


def measure(props: dict[str, Any]) -> GateResult:
    """The gate: the ring, then (failed) the pairs; the result, failed ones included."""
    start = time.monotonic()
    tasks = props["tasks"]
    floor = float(props["min_busbw_MBps"])
    if len(tasks) < 2:
        return GateResult("skipped", "one training task: no link to measure")
    if _training_running(props):
        return GateResult(
            "skipped", "training already runs in these tasks: the gate measures before a launch"
        )
    rc, text = _run_group(props, tasks)
    figures = parse_figures(text)
    reason = (
        ring_verdict(figures, floor) if rc == 0 else f"the all-reduce failed: {failed_ranks(text)}"
    )
    if not reason:
        return GateResult("passed", "", figures, None, time.monotonic() - start)
    by_node = {t["node"]: t for t in tasks}
    pairs: dict[tuple[str, str], float] = {}
    errors: dict[tuple[str, str], str] = {}
    for round_ in pair_rounds([t["node"] for t in tasks]):
        with ThreadPoolExecutor(max_workers=len(round_)) as pool:
            done = pool.map(lambda p: _run_group(props, [by_node[p[0]], by_node[p[1]]]), round_)
            for pair, (prc, ptext) in zip(round_, done, strict=True):
                pairs[pair], why = _figure_of(prc, ptext)
                if why:
                    errors[pair] = why
    loc = localise(list(by_node), pairs, floor, errors)
    return GateResult("failed", reason, figures, loc, time.monotonic() - start)


class CollectiveGateProvider(BoundaryProvider):
    """Measures on create/update and refuses a slow or wrong all-reduce."""

    def _apply(self, props: dict[str, Any]) -> dict[str, Any]:
        result = measure(props)
        if result.state == "failed":
            raise Exception(
                failure_message(
                    result.reason,
                    result.localisation,
                    props["remedies"],
                    float(props["min_busbw_MBps"]),
                    result.seconds,
                )
            )
        return {**props, **result.outputs()}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_="gate", outs=self._apply(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=self._apply(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, GATE_KEYS)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # The record as it is: measuring beside a live job would disturb it.
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """A measurement leaves nothing behind."""


class CollectiveGate(Resource):
    """The all-reduce gate's record (dynamic resource)."""

    state: pulumi.Output[str]
    reason: pulumi.Output[str]
    busbw_MBps: pulumi.Output[float]
    figures: pulumi.Output[list[dict[str, Any]]]
    localisation: pulumi.Output[dict[str, Any] | None]
    seconds: pulumi.Output[float]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        outputs = dict.fromkeys(GATE_OUTPUTS)
        super().__init__(CollectiveGateProvider(), name, {**props, **outputs}, opts)
