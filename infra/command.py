"""`training.command`, split: the user's command line as typed on one node, taken apart
into its launcher, the launcher's options, the script (or module) and the script's own
arguments.

Below both of its users: the config rules refuse what the program owns and check the
files the command names (infra/config/rules/command.py), and the renderer inserts the
launcher's own flags (infra/render/command.py), so neither part imports the other for
it. Pure: no I/O.

The launchers' options mirror DeepSpeed 0.17.6 (deepspeed/launcher/runner.py
`parse_args`) and torchrun (torch/distributed/run.py `get_args_parser`). Both parse with
argparse, which takes a unique prefix of a long option for the option (`--master_p`
is `--master_port`), so a prefix is resolved before it is judged.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

LauncherName = Literal["deepspeed", "torchrun", "python"]
COMMAND_KEY = "training.command"

ALLOWED_FORMS = (
    "`deepspeed [options] script|--module m [args]`, `torchrun [options] script|-m m "
    "[args]`, `python -m torch.distributed.run [options] script [args]` or "
    "`python[3] [-u] script|-m m [args]`"
)

# Option -> whether it takes a value, per launcher: the options a command may use.
DEEPSPEED_OPTIONS: Mapping[str, bool] = {
    "--module": False,
    "--no_python": False,
    "--no_local_rank": False,
    "--no_ssh_check": False,
    "--save_pid": False,
    "--bind_cores_to_rank": False,
    "--bind_core_list": True,
    "--enable_each_rank_log": True,
    "--comment": True,
    "--account": True,
}
# What the program sets from the stack (or refuses outright), with what to do instead.
_ROSTER = "the program sets it from the task roster"
DEEPSPEED_OWNED: Mapping[str, str] = {
    "-H": _ROSTER,
    "--hostfile": _ROSTER,
    "--master_addr": _ROSTER,
    "--master_port": "set training.master_port",
    "--node_rank": _ROSTER,
    "--no_ssh": "set training.launch_mode",
    "--launcher": "set training.launch_mode",
    "--launcher_args": "the program runs pdsh itself",
    "--ssh_port": "set training.sshd_port",
    "--num_nodes": "set training.nodes",
    "-i": "set training.nodes",
    "--include": "set training.nodes",
    "-e": "set training.nodes",
    "--exclude": "set training.nodes",
    "--num_gpus": "set training.gpus_per_node or training.procs_per_node",
    "--num_accelerators": "set training.gpus_per_node or training.procs_per_node",
    "--force_multi": "the program chooses the launch mode",
    "--elastic_training": "elastic training is not supported",
    "--min_elastic_nodes": "elastic training is not supported",
    "--max_elastic_nodes": "elastic training is not supported",
    "--autotuning": "autotuning is not supported",
}
# torchrun spells every option both ways (`--nproc-per-node`, `--nproc_per_node`).
_TORCHRUN_ALLOWED = {
    "--max-restarts": True,
    "--monitor-interval": True,
    "--start-method": True,
    "--event-log-handler": True,
    "--role": True,
    "--module": False,
    "--no-python": False,
    "--run-path": False,
    "--log-dir": True,
    "--redirects": True,
    "--tee": True,
    "--local-ranks-filter": True,
    "--local-addr": True,
    "--logs-specs": True,
    "--numa-binding": True,
    "--signals-to-handle": True,
}
_TORCHRUN_OWNED = {
    "--nnodes": _ROSTER,
    "--nproc-per-node": "set training.gpus_per_node or training.procs_per_node",
    "--node-rank": _ROSTER,
    "--master-addr": _ROSTER,
    "--master-port": "set training.master_port",
    "--standalone": "the program runs torchrun across the cluster (static rendezvous)",
    "--rdzv-backend": "the program uses the static rendezvous on the master",
    "--rdzv-endpoint": "the program uses the static rendezvous on the master",
    "--rdzv-id": "the program uses the static rendezvous on the master",
    "--rdzv-conf": "the program uses the static rendezvous on the master",
}


def _both(table: Mapping[str, object]) -> dict[str, object]:
    return {
        spelling: v
        for k, v in table.items()
        for spelling in {k, k.replace("-", "_").replace("__", "--", 1)}
    }


TORCHRUN_OPTIONS: Mapping[str, bool] = {
    **{k: bool(v) for k, v in _both(_TORCHRUN_ALLOWED).items()},
    "-m": False,
    "-r": True,
    "-t": True,
}
TORCHRUN_OWNED: Mapping[str, str] = {k: str(v) for k, v in _both(_TORCHRUN_OWNED).items()}

# Module spellings of the launchers after `python -m`.
_LAUNCHER_MODULES: Mapping[str, LauncherName] = {
    "torch.distributed.run": "torchrun",
    "deepspeed.launcher.runner": "deepspeed",
}
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
DEEPSPEED_CONFIG_FLAG = "--deepspeed_config"


class CommandError(ValueError):
    """A command the program cannot run as asked; the message names what and why."""


@dataclass(frozen=True)
class Command:
    """`training.command`, taken apart."""

    launcher: LauncherName
    """deepspeed, torchrun, or python (a plain script, wrapped in training.launcher)."""
    typed: tuple[str, ...]
    """The launcher as typed (`deepspeed`, `torchrun`, `python3 -m torch.distributed.run`,
    `python3`): for messages only; the program runs the image's own."""
    options: tuple[str, ...]
    """The launcher's options as typed (python: `-u`), none of them the program's."""
    module: bool
    """The target is a module (`--module`, `-m`), not a script path."""
    target: str
    """The script's path (relative to the code dir, or absolute in the image), or the
    module's name."""
    args: tuple[str, ...]
    """The script's own arguments, verbatim."""

    @property
    def deepspeed_config(self) -> str | None:
        """The path the script is given as DeepSpeed's `--deepspeed_config`
        (`deepspeed.add_config_arguments`), as typed; None without one."""
        args = self.args
        for i, arg in enumerate(args):
            if arg == DEEPSPEED_CONFIG_FLAG and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(DEEPSPEED_CONFIG_FLAG + "="):
                return arg.split("=", 1)[1]
        return None


def tokens(command: str | Sequence[str]) -> list[str]:
    """The command's words: a list as it is, a string split as a POSIX shell would."""
    if isinstance(command, str):
        try:
            return shlex.split(command)
        except ValueError as e:
            raise CommandError(
                f"{command!r} is not a command line a shell can split ({e}); allowed: "
                "balanced quotes, or a list of words"
            ) from None
    return list(command)


LAUNCHER_WORDS = ("deepspeed", "torchrun", "accelerate")
"""First words that make a command (accelerate: to be refused with its reason)."""


def starts_command(words: Sequence[str]) -> bool:
    """Whether `words` begin with a launcher or a Python interpreter (`scripts/job submit
    DIR -- ...`: then they are `training.command`, else the script's arguments). A path
    counts by its last part (`/opt/venv/bin/python3`)."""
    if not words:
        return False
    head = words[0].rsplit("/", 1)[-1]
    return head in LAUNCHER_WORDS or bool(_PYTHON.match(head))


def split_command(command: str | Sequence[str]) -> Command:
    """`training.command` taken apart, or CommandError naming the word, why it is
    refused and what is allowed."""
    words = tokens(command)
    if not words:
        raise CommandError(f"the command is empty; allowed: {ALLOWED_FORMS}")
    head = words[0].rsplit("/", 1)[-1]
    if head == "deepspeed":
        return _launcher("deepspeed", words[:1], words[1:])
    if head == "torchrun":
        return _launcher("torchrun", words[:1], words[1:])
    if head == "accelerate":
        raise CommandError(
            f"{words[0]!r}: Hugging Face Accelerate is not in the image; allowed: "
            f"{ALLOWED_FORMS} (a script that uses Accelerate runs under torchrun)"
        )
    if _PYTHON.match(head):
        return _python(words)
    raise CommandError(
        f"{words[0]!r} is not a launcher or a Python interpreter; allowed: {ALLOWED_FORMS}"
    )


def _python(words: list[str]) -> Command:
    """`python [-u] script|-m m args`, or a launcher run as a module."""
    options: list[str] = []
    rest = words[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        if rest[0] != "-u":
            raise CommandError(
                f"python option {rest[0]!r}: the launcher starts the interpreter itself; "
                "allowed: -u, then a script or -m module"
            )
        options.append(rest.pop(0))
    if not rest:
        raise CommandError(f"{shlex.join(words)!r} names no script; allowed: {ALLOWED_FORMS}")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise CommandError(f"{shlex.join(words)!r}: -m names no module; allowed: -m module")
        module = rest[1]
        if module in _LAUNCHER_MODULES:
            return _launcher(
                _LAUNCHER_MODULES[module], [*words[:1], *options, "-m", module], rest[2:]
            )
        return Command("python", tuple(words[:1]), tuple(options), True, module, tuple(rest[2:]))
    return Command("python", tuple(words[:1]), tuple(options), False, rest[0], tuple(rest[1:]))


def _launcher(name: LauncherName, typed: list[str], rest: list[str]) -> Command:
    """A deepspeed or torchrun command line: its options up to the script."""
    if name == "deepspeed":
        allowed, owned = DEEPSPEED_OPTIONS, DEEPSPEED_OWNED
        module_flags = {"--module"}
    else:
        allowed, owned = TORCHRUN_OPTIONS, TORCHRUN_OWNED
        module_flags = {"-m", "--module"}
    options: list[str] = []
    module = False
    while rest and rest[0].startswith("-") and rest[0] != "-":
        word = rest.pop(0)
        flag, has_value, _ = word.partition("=")
        canonical = _resolve(flag, [*allowed, *owned])
        if canonical is None:
            raise CommandError(
                f"{name} option {word!r} is not one the program knows; allowed: "
                f"{_allowed_text(name)}"
            )
        if canonical in owned:
            raise CommandError(
                f"{name} option {word!r} is the program's ({owned[canonical]}); allowed: "
                f"{_allowed_text(name)}"
            )
        options.append(word)
        module = module or canonical in module_flags
        if allowed[canonical] and not has_value:
            if not rest:
                raise CommandError(f"{name} option {word!r} takes a value; none given")
            options.append(rest.pop(0))
    if not rest:
        raise CommandError(
            f"{shlex.join([*typed, *options])!r} names no script; allowed: {ALLOWED_FORMS}"
        )
    return Command(name, tuple(typed), tuple(options), module, rest[0], tuple(rest[1:]))


def _allowed_text(name: LauncherName) -> str:
    """The options a command may give launcher `name`, for a message."""
    if name == "deepspeed":
        return ", ".join(sorted(DEEPSPEED_OPTIONS))
    return ", ".join(["-m", "-r", "-t", *sorted(_TORCHRUN_ALLOWED)]) + " (or with `_`)"


def _resolve(flag: str, known: Sequence[str]) -> str | None:
    """The option `flag` stands for: itself, or (argparse's abbreviation) the one long
    option it is a unique prefix of; None when it is neither."""
    if flag in known:
        return flag
    if not flag.startswith("--"):
        return None
    matches = {k for k in known if k.startswith(flag)}
    # The two spellings of one torchrun option are one option.
    canon = {m.replace("_", "-") for m in matches}
    return sorted(matches)[0] if len(canon) == 1 else None
