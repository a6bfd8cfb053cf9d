"""The lab as tests, benchmarks and operators reach it: the docker CLI and API against
lab host i's own daemon, the `python -m lab` commands, and the shared /data folder the
training runs log to.

Host i's daemon listens on `<lab root>/h<i>/docker.sock` (lab/config.py); the lab root
is DSS_LAB_ROOT or /var/lib/dss-lab.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import ROOT
from harness.waits import retry, wait_for
from infra.layout import TRAINING_SERVICES
from infra.render.run import RESTARTS_FILE
from lab import config as c

if TYPE_CHECKING:
    import docker as docker_sdk
    from docker.models.containers import Container
    from docker.models.resource import Model

LAB_ROOT = c.lab_root()
"""The running lab's root, as `python -m lab` finds it."""


class CommandFailed(AssertionError):
    """A lab command exited non-zero (an AssertionError: tests report it as a failure)."""


def socket(i: int) -> Path:
    """Lab host i's docker socket (1-based)."""
    return c.LabPaths(LAB_ROOT).host(i).socket


def docker_argv(i: int) -> list[str]:
    """`docker -H unix://<host i's socket>`: the CLI as an operator on host i."""
    return ["docker", "-H", f"unix://{socket(i)}"]


def docker_run(
    i: int, *args: str, check: bool = True, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`docker <args>` against lab host i; with `check`, a non-zero exit fails naming
    the host, the command and what docker said."""
    proc = subprocess.run(
        [*docker_argv(i), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        check=False,
    )
    if check and proc.returncode != 0:
        raise CommandFailed(
            f"{c.host_name(i)}: docker {' '.join(args)} exited {proc.returncode}: "
            f"{proc.stderr.strip()[-4000:]}"
        )
    return proc


def docker(i: int, *args: str, timeout: float = 300) -> str:
    """The stdout of `docker <args>` against lab host i, which must succeed."""
    return docker_run(i, *args, timeout=timeout).stdout


def client(i: int, timeout: int = 60) -> docker_sdk.DockerClient:
    """A Docker API client for lab host i."""
    # Imported here: the docker SDK is only needed by the callers that talk to the API.
    import docker as docker_sdk

    return docker_sdk.DockerClient(base_url=f"unix://{socket(i)}", timeout=timeout)


def edit_node(node: str, **spec: Any) -> None:
    """Change a swarm node's spec by hand, as an operator would (`Role`, `Availability`,
    `Labels`), through lab host 1 (a manager). Swarm writes nodes itself too (a task
    landing on a node adds a network attachment), so an edit takes the program's
    read-again-on-conflict path: `docker node update` would fail "update out of
    sequence" where the operator would simply run it again."""
    # Imported here: harness.lab is imported by code that never touches the providers.
    from infra.providers.swarm import update_node_spec

    api = client(1)
    try:
        update_node_spec(api, node, lambda current: current | spec)
    finally:
        api.close()


@contextlib.contextmanager
def sysfs_faked(i: int, path: str, text: str) -> Iterator[Path]:
    """Lab host i reads `text` at the sysfs file `path` (e.g. /sys/class/net/eth0/speed)
    inside the context: a file bind-mounted over it in the host's mount namespace, where
    its sshd runs, so the host facts read it over SSH as they read the real one. Yields
    the file (write it to change what the host reads); unmounted after, also on failure."""
    hp = c.LabPaths(c.lab_root()).host(i)
    fake = hp.dir / "sysfs" / path.strip("/").replace("/", "_")
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(text)
    ns = ["nsenter", "-t", hp.sshd_pid.read_text().strip(), "-m", "--"]
    subprocess.run([*ns, "mount", "--bind", str(fake), path], check=True)
    try:
        yield fake
    finally:
        subprocess.run([*ns, "umount", path], check=False)
        fake.unlink(missing_ok=True)


def _tc(i: int, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", c.netns_name(i), "tc", "qdisc", *args],
        check=check,
        capture_output=True,
        text=True,
    )


def shape_link(i: int, rate: str) -> str:
    """Lab host i sends at `rate` (tc's units, e.g. `40mbit`) on its link (every packet
    it sends: the overlay's too): netem with a 2 ms delay where the kernel has it, else
    a token bucket (a kernel without sch_netem says "Specified qdisc kind is unknown").
    The qdisc used, in words."""
    netem = _tc(
        i, "replace", "dev", "eth0", "root", "netem", "rate", rate, "delay", "2ms", check=False
    )
    if netem.returncode == 0:
        return f"netem rate {rate} delay 2ms"
    # burst in bytes above the link's MTU (9100) and GSO's 64 KiB segments: a smaller
    # bucket drops every full-size packet instead of pacing it (the all-reduce hangs).
    tbf = ("tbf", "rate", rate, "burst", "256kb", "latency", "100ms")
    _tc(i, "replace", "dev", "eth0", "root", *tbf)
    return f"tbf rate {rate} (no netem: {netem.stderr.strip()})"


def unshape_link(i: int) -> None:
    """Lab host i's link back to full speed (nothing to do if it was not shaped)."""
    _tc(i, "del", "dev", "eth0", "root", check=False)


def service_versions() -> dict[str, int]:
    """Every swarm service's spec version (from lab host 1, a manager): unchanged means
    Swarm restarted nothing."""
    out = docker(1, "service", "ls", "--format", "{{.Name}}")
    return {
        name: int(docker(1, "service", "inspect", name, "--format", "{{.Version.Index}}"))
        for name in out.split()
    }


def host_index(node: str) -> int:
    """The index of a lab host from its name (`lab-h3` -> 3)."""
    return int(node.removeprefix("lab-h"))


def lab_cli(
    *args: str, check: bool = True, timeout: float | None = 600, capture: bool = True
) -> subprocess.CompletedProcess[str]:
    """`python -m lab <args>` (up, down, status ...) from the project root. With
    `capture` false, stdout is dropped and stderr goes to the terminal (benchmarks)."""
    argv = [sys.executable, "-m", "lab", *args]
    if capture:
        return subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, check=check, timeout=timeout
        )
    return subprocess.run(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, text=True, check=check, timeout=timeout
    )


def lab_status() -> dict[str, Any]:
    """`python -m lab status --json`."""
    return dict(json.loads(lab_cli("status", "--json").stdout))


def shared(*parts: str) -> Path:
    """A path on the lab's shared /data (training.data_dir of the lab stacks)."""
    return LAB_ROOT.joinpath("shared", *parts)


def run_log(run: str, name: str) -> Path:
    """A log file of training run `run` on the shared /data (metrics.jsonl, launcher.log)."""
    return shared("logs", run, name)


def restart_events(run: str) -> list[dict[str, Any]]:
    """Run `run`'s restarts file as its supervisor writes it (infra/render/supervisor.py):
    one record per automatic restart, lost task, hostfile move or spent budget."""
    log = run_log(run, RESTARTS_FILE)
    text = log.read_text() if log.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def logged_steps(run: str) -> list[int]:
    """The steps rank 0 of run `run` has logged so far."""
    log = run_log(run, "metrics.jsonl")
    text = log.read_text() if log.exists() else ""
    return [json.loads(x)["step"] for x in text.splitlines() if x.strip()]


# What rank 0 prints when it resumes (images/dss_train/main.py): the checkpoint's
# folder (`<root>/step_<NNNNNNNN>`, images/dss_train/checkpoints.py) and the first step
# it trains.
_RESUME_LINE = re.compile(r"resumed from (\S+), next step (\d+)")
_CHECKPOINT_STEP = re.compile(r"/step_(\d+)$")


@dataclass(frozen=True)
class Resume:
    """One resume rank 0 announced: the checkpoint it loaded and the next step."""

    checkpoint: str
    next_step: int

    @property
    def checkpoint_step(self) -> int | None:
        """The step the checkpoint holds (None: a folder not named `step_<N>`)."""
        m = _CHECKPOINT_STEP.search(self.checkpoint)
        return int(m.group(1)) if m else None


def resumes_in(text: str) -> list[Resume]:
    """Every resume announced in a launcher log's text, in order."""
    return [Resume(m.group(1), int(m.group(2))) for m in _RESUME_LINE.finditer(text)]


def run_resumes(run: str) -> list[Resume]:
    """Every resume of training run `run` so far, as its launcher log has them."""
    log = run_log(run, "launcher.log")
    return resumes_in(log.read_text(errors="replace")) if log.exists() else []


# What rank 0 prints when a stop's SIGTERM made it save a last checkpoint and exit
# (images/dss_train/main.py).
_STOP_LINE = re.compile(r"stopped by signal after step (\d+)")


def stop_checkpoint_step(text: str) -> int | None:
    """The step a stop's final checkpoint holds, from rank 0's line in a launcher log's
    text (None: no stop saved one there)."""
    m = _STOP_LINE.search(text)
    return int(m.group(1)) if m else None


def check_resumed_after_the_stop(text: str, first: int, last: int) -> int:
    """A relaunch after a stop (a launch replaced, infra/task/ranks.py) resumed at the
    step after the stop's final checkpoint (`text`: the launcher log since the stop),
    past `last`, the newest step logged before it: no logged step is trained again.
    Returns the stop's step; AssertionError naming the steps otherwise."""
    stopped = stop_checkpoint_step(text)
    assert stopped is not None, "the stop saved no final checkpoint (no 'stopped by signal' line)"
    assert first == stopped + 1 and first > last, (
        f"resumed at {first}; the stop saved step {stopped}, {last} was logged before"
    )
    return stopped


def restart_events_after(run: str, seen: int) -> list[dict[str, Any]] | None:
    """Run `run`'s restart events after the first `seen`, or None while there are none."""
    return restart_events(run)[seen:] or None


def launcher_log_size(run: str) -> int:
    """How long run `run`'s launcher log is now (an offset for the helpers below)."""
    log = run_log(run, "launcher.log")
    return log.stat().st_size if log.exists() else 0


def launcher_log_since(run: str, offset: int) -> str:
    """Run `run`'s launcher log after `offset`."""
    return run_log(run, "launcher.log").read_bytes()[offset:].decode(errors="replace")


def resumed_step(run: str, offset: int) -> int | None:
    """The checkpoint step a relaunch resumed from, from the launcher log after `offset`."""
    found = (
        resumes_in(launcher_log_since(run, offset)) if run_log(run, "launcher.log").exists() else []
    )
    return found[0].checkpoint_step if found else None


def wait_resumed(run: str, offset: int, timeout: float = 600) -> int:
    """The checkpoint step a relaunch resumed from (the launcher log after `offset`),
    once the next step is logged; on a timeout the log since and the restarts file are
    the failure's evidence (the lab is gone afterwards)."""
    try:
        step = wait_for(
            "the resume line in launcher.log", lambda: resumed_step(run, offset), timeout
        )
        wait_for(f"step {step + 1} logged", lambda: step + 1 in logged_steps(run), timeout, 1)
    except AssertionError as e:
        tail = launcher_log_since(run, offset)[-4000:]
        raise AssertionError(
            f"{e}\nlauncher.log since:\n{tail}\nrestarts.jsonl: {restart_events(run)}"
        ) from None
    return int(step)


def tasks_of(service: str, manager: int = 1) -> list[tuple[str, str]]:
    """(node, state) of the service's tasks Swarm wants running, as manager host
    `manager` sees them, e.g. ("lab-h9", "Running")."""
    running = ["--filter", "desired-state=running", "--format", "{{.Node}} {{.CurrentState}}"]
    out = docker(manager, "service", "ps", service, *running)
    return [(line.split()[0], line.split()[1]) for line in out.splitlines() if line.strip()]


def remove_network(api: docker_sdk.DockerClient, network: str, timeout: float = 90.0) -> None:
    """Remove an overlay by hand once the tasks of removed services have left it
    (Docker refuses to remove a network that still has endpoints), and return once this
    daemon no longer shows it by its id. The removal is answered when the swarm forgets
    the network, but the manager's own copy of it goes a moment later, and until then an
    inspect by id (what the Docker provider's refresh reads) still finds it: a refresh
    asked in between rightly reports the network present (seen in a full run)."""
    from docker.errors import APIError, NotFound

    net_id = ident(api.networks.get(network))

    def remove() -> None:
        with contextlib.suppress(NotFound):  # an earlier try went through after all
            api.networks.get(net_id).remove()

    retry(remove, timeout, on=(APIError,))

    def gone() -> bool:
        try:
            api.networks.get(net_id)
        except NotFound:
            return True
        return False

    wait_for(f"overlay {network} ({net_id[:12]}) gone from the daemon", gone, timeout)


def exec_text(container: Container, argv: list[str], user: str = "") -> str:
    """The output of `argv` run in a running container (not streamed: one bytes value)."""
    output = container.exec_run(argv, user=user).output
    assert isinstance(output, bytes), f"{container.name}: {argv} streamed its output"
    return output.decode()


def ident(obj: Model) -> str:
    """The id of a Docker object the SDK made or found (typed optional: a new one has none
    until the daemon answers, and these have answered)."""
    assert obj.id is not None, f"{type(obj).__name__} {obj.attrs} has no id"
    return obj.id


def running_training_tasks(services: Sequence[str] = TRAINING_SERVICES) -> dict[str, set[str]]:
    """Running task ids per training service (a single stack's unless `services` says
    a job's), as the leader (lab host 1) lists them."""
    api: Any = client(1).api  # docker-py's low-level API is untyped
    out: dict[str, set[str]] = {}
    for service in services:
        tasks = api.tasks(filters={"service": service, "desired-state": "running"})
        out[service] = {t["ID"] for t in tasks if t["Status"]["State"] == "running"}
    return out


def training_processes(
    hosts: int, services: Sequence[str] = TRAINING_SERVICES
) -> dict[str, set[str]]:
    """Per training task container on lab hosts 1..hosts (of a single stack's services
    unless `services` says a job's), the `pid start-time` of every training process in
    it (the launcher and its ranks): a restarted process has a new pid or start time."""
    out: dict[str, set[str]] = {}
    for i in range(1, hosts + 1):
        for ctr in client(i).containers.list():
            service = ctr.labels.get("com.docker.swarm.service.name", "")
            if service not in services:
                continue
            ps = exec_text(ctr, ["ps", "-eo", "pid=,lstart=,args="])
            out[f"{service}@{ident(ctr)}"] = {
                " ".join(line.split()[:6]) for line in ps.splitlines() if "train.py" in line
            }
    return out
