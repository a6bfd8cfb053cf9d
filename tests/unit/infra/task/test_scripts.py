"""The host scripts (infra/task/*.sh) as the program renders them, for every variant the
config can produce: each launch mode, each kind of program (the image's script, a code
dir's, a training.command's script or module, under its launcher or python), each
recovery, each data plane (RDMA too), the fork server and monitoring on and off.

Golden files (tests/unit/infra/golden/scripts/, `DSS_UPDATE_GOLDEN=1` rewrites them):
per variant and launch target, the launch script, its supervisor and its stop, each
text stored once (index.json names the file of each). In a golden launch the files it
hands the task from infra/task/*.py are a stand-in `<infra/task/NAME>` (only where the
text is that file's, byte for byte) and the supervisor `<the supervisor>` (its own
golden): the launch's shape is what is held here; the programs are their own tests',
and the whole launch script with them is in golden/launch_*.sh and resources-*.json.
scripts/lint runs shellcheck on every file here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from infra.components.launchplan import (
    TrainingLaunchArgs,
    follow_of,
    launch_targets,
    target_script,
    universal_dir,
)
from infra.config import (
    ConfigError,
    StackConfig,
    duration_seconds,
    parse_stack_config,
    resumes_universal,
)
from infra.render.command import rank_pattern, script_path
from infra.render.runfiles import follow_program, forkserver_program
from infra.render.stop import CommandRanks, stop_script
from infra.render.supervisor import takeover_loop
from infra.render.template import TASK_DIR
from tests.unit.infra.samples import host

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parents[1] / "golden" / "scripts"
INDEX = "index.json"
UPDATE = "DSS_UPDATE_GOLDEN=1 rewrites them"
CODE = "/data/code/run/0123456789ab"
"""The synced code's path in the tasks (its digest stands in)."""
HOSTFILE = "10.0.1.3 slots=8\n10.0.1.4 slots=8\n10.0.1.5 slots=8\n"

LAUNCHES = ("pdsh", "no_ssh", "torchrun")
PROGRAMS: dict[str, str | None] = {
    "image": None,
    "code": None,
    "script": "{launcher} train.py --epochs 2",
    "module": "{launcher} {module} mypkg.train",
    "python": "python train.py --x 1",
    "python_module": "python -m mypkg.train",
    "universal": "{launcher} train.py --deepspeed_config ds_universal.json",
}
"""training.script from the image or from the code dir, else the training.command
(`universal`: its DeepSpeed config loads universal checkpoints, so rank 0's supervisor
makes the newest one universal before each attempt)."""
RECOVERIES = ("off", "follow_moves", "follow_master")
PLANES = ("overlay", "host", "rdma")


@dataclass(frozen=True)
class Variant:
    launch: str
    program: str
    recovery: str
    plane: str
    fork_server: bool
    monitoring: bool

    @property
    def name(self) -> str:
        fork = "fork" if self.fork_server else "nofork"
        mon = "mon" if self.monitoring else "nomon"
        return f"{self.launch}-{self.program}-{self.recovery}-{self.plane}-{fork}-{mon}"

    def raw(self, code_dir: Path) -> dict[str, Any]:
        """The stack config: three hosts (a spare too with follow_master)."""
        spare = [{**host(4), "spare": True}] if self.recovery == "follow_master" else []
        hosts = [host(1, "manager"), host(2), host(3), *spare]
        if self.plane == "rdma":
            hosts = [{**h, "rdma_interface": "mlx5_0"} for h in hosts]
        plane = "overlay" if self.plane == "overlay" else "host"
        launcher = "torchrun" if self.launch == "torchrun" else "deepspeed"
        t: dict[str, Any] = {"gpus_per_node": 8, "fork_server": self.fork_server}
        t |= {"launcher": launcher} if self.launch == "torchrun" else {}
        t |= {"launch_mode": "no_ssh"} if self.launch == "no_ssh" else {}
        t |= {"code": {"dir": str(code_dir)}} if self.program != "image" else {}
        t |= {"script": "train.py"} if self.program == "code" else {}
        command = PROGRAMS[self.program]
        if command is not None:
            module = "-m" if launcher == "torchrun" else "--module"
            t |= {"command": command.format(launcher=launcher, module=module), "env": {"A": "b c"}}
        if self.recovery != "off":
            t["recovery"] = {"follow_moves": True}
            t["recovery"] |= {"follow_master": True} if self.recovery == "follow_master" else {}
        return {
            "hosts": hosts,
            "network": {"mtu": 9000, "underlay_mtu": 9100, "data_plane": plane},
            "training": t,
            "ssh": {"known_hosts_file": "~/.ssh/known_hosts"},
        }


def every_combination() -> list[Variant]:
    return [
        Variant(*v)
        for v in itertools.product(
            LAUNCHES, PROGRAMS, RECOVERIES, PLANES, (False, True), (False, True)
        )
    ]


def allowed(v: Variant) -> bool:
    """What the config rules allow: follow_moves only under pdsh, the fork server only
    with the deepspeed launcher."""
    return (v.launch == "pdsh" or v.recovery == "off") and not (
        v.launch == "torchrun" and v.fork_server
    )


VARIANTS = [v for v in every_combination() if allowed(v)]


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A code dir in the tutorial's shape, with a `.deepspeed_env` (its path reaches no
    script: the tasks see the code at CODE)."""
    root = tmp_path_factory.mktemp("code")
    (root / "train.py").write_text("print(1)\n")
    (root / "ds_config.json").write_text('{"train_batch_size": 24}')
    (root / "ds_universal.json").write_text(
        '{"train_batch_size": 24, "zero_optimization": {"stage": 2}, '
        '"checkpoint": {"load_universal": true}}'
    )
    (root / ".deepspeed_env").write_text("FROM_DS_ENV=1\n")
    return root


def launch_args(cfg: StackConfig, monitoring: bool) -> TrainingLaunchArgs:
    """What the launch plan reads (services by name only; no swarm or image)."""
    services = SimpleNamespace(master_name="ds-master", worker_name="ds-worker")
    none = cast(Any, None)
    return TrainingLaunchArgs(
        training=cfg.training,
        master=cfg.master,
        training_hosts=cfg.training_hosts,
        hosts=cfg.hosts,
        network=cfg.network,
        preflight=cfg.preflight,
        services=cast(Any, services),
        swarm=none,
        image=none,
        restart_metrics=monitoring,
        universal_checkpoints=resumes_universal(cfg.training),
    )


WRITE = re.compile(
    r"^printf %s ('(?:[^']|'\"'\"')*'|\S+)"
    r"( \| docker exec -i -u \d+ \"\$ctr\" sh -c '[^']*')$",
    re.MULTILINE,
)
"""A file the launch hands the task: its text (one shell word), then the writer."""


@cache
def programs() -> dict[str, str]:
    """The text of each infra/task/*.py as the launch writes it (one shell word) -> its
    stand-in in a golden launch."""
    texts = {shlex.quote(follow_program(p.name)): p.name for p in TASK_DIR.glob("*.py")}
    texts[shlex.quote(forkserver_program())] = "forkserver.py, its #! line first"
    return {word: shlex.quote(f"<infra/task/{name}>") for word, name in texts.items()}


def split_launch(launch: str) -> tuple[str, str]:
    """The launch with its programs and supervisor as stand-ins, and the supervisor."""
    found: list[str] = []

    def stand_in(m: re.Match[str]) -> str:
        if m[1] in programs():
            return f"printf %s {programs()[m[1]]}{m[2]}"
        if "/supervise" in m[2]:
            found.append(shlex.split(m[1])[0])
            return f"printf %s '<the supervisor>'{m[2]}"
        return m[0]

    text = WRITE.sub(stand_in, launch)
    assert len(found) == 1, f"expected one supervisor in the launch, found {len(found)}"
    return text, found[0]


def scripts(v: Variant, code_dir: Path) -> dict[str, str]:
    """The variant's scripts by role: per launch target (pdsh: one; else the first two
    nodes, `-<rank>`) its launch, supervisor and stop; follow_master's takeover loop."""
    cfg = parse_stack_config(v.raw(code_dir))
    args, t = launch_args(cfg, v.monitoring), cfg.training
    code_path = None if v.program == "image" else CODE
    parsed = t.parsed_command
    if parsed is not None:
        task_script = rank_pattern(parsed, code_path)
    else:
        task_script = f"{code_path}/{t.script}" if code_path else t.script
    follow = follow_of(args, task_script)
    out = {"takeover-loop": takeover_loop()} if t.recovery.follow_master else {}
    for _, service, rank in launch_targets(args)[:2]:
        suffix = "" if rank is None else f"-{rank}"
        where = (HOSTFILE, "10.0.1.3", service, rank)
        launch = target_script(args, task_script, follow, *where, code_path)
        out[f"launch{suffix}"], out[f"supervise{suffix}"] = split_launch(launch)
        ranks = None
        if parsed is not None:  # as TrainingLaunch's delete: under pdsh on every host
            port = t.sshd_port if rank is None else None
            ranks = CommandRanks(script_path(parsed, code_path), parsed.module, port)
        out[f"stop{suffix}"] = stop_script(
            service=service,
            grace_seconds=duration_seconds(t.stop_grace_period),
            pattern=task_script,
            run_name=t.run_name,
            follow=follow is not None,
            takeover=t.recovery.follow_master,
            data_dir=t.data_dir,
            command=ranks,
            universal=universal_dir(args, rank) is not None,
        )
    return out


def rendered(code_dir: Path) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Every variant's scripts: the index (variant -> role -> file) and the files (name
    -> text), each text once, named after the first variant that has it."""
    index: dict[str, dict[str, str]] = {}
    files: dict[str, str] = {}
    by_text: dict[str, str] = {}
    for v in VARIANTS:
        roles = index.setdefault(v.name, {})
        for role, text in scripts(v, code_dir).items():
            name = by_text.setdefault(text, f"{v.name}.{role}.sh")
            files[name], roles[role] = text, name
    return index, files


def test_every_variant_the_config_allows_is_here(code_dir: Path) -> None:
    """The variants are exactly the combinations the config rules accept."""
    for v in every_combination():
        try:
            parse_stack_config(v.raw(code_dir))
            accepted = True
        except ConfigError:
            accepted = False
        assert accepted == allowed(v), f"{v.name}: the config rules accept it: {accepted}"


def test_scripts_match_their_goldens(code_dir: Path) -> None:
    """Every variant's launch, supervisor and stop equal their golden files, byte for byte
    (a changed byte relaunches every such run on upgrade)."""
    index, files = rendered(code_dir)
    if os.environ.get("DSS_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for old in GOLDEN.iterdir():
            old.unlink()
        for name, text in files.items():
            (GOLDEN / name).write_text(text)
        (GOLDEN / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    held = json.loads((GOLDEN / INDEX).read_text())
    changed = sorted(v for v in index.keys() | held.keys() if index.get(v) != held.get(v))
    assert not changed, f"variants whose scripts moved in {INDEX} ({UPDATE}): {changed}"
    on_disk = {p.name for p in GOLDEN.iterdir()} - {INDEX}
    assert on_disk == set(files), f"golden files no variant has: {sorted(on_disk - set(files))}"
    differ = sorted(n for n, text in files.items() if (GOLDEN / n).read_text() != text)
    assert not differ, f"scripts that differ from their golden files ({UPDATE}): {differ}"
