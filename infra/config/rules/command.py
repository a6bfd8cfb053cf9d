"""Rules about `training.command` (infra/command.py takes it apart; the command's own
words are checked by the model): what it may not be given with, its launcher against
`training.launcher`, its script in the code dir, the DeepSpeed config file it names,
and DeepSpeed's `.deepspeed_env` in the code dir.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from infra.codedir import listing
from infra.command import DEEPSPEED_CONFIG_FLAG
from infra.config.rules import deepspeed
from infra.config.rules.code import code_dir
from infra.config.rules.training import LAUNCHER_ENV

if TYPE_CHECKING:
    from infra.config.models.job import Training
    from infra.config.models.stack import StackConfig

DEEPSPEED_ENV_FILE = ".deepspeed_env"
"""DeepSpeed's runner exports this file's lines on every node (runner.py
DEEPSPEED_ENVIRONMENT_NAME); in the code dir, the launch hands it to every rank."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DsCheck = Callable[["StackConfig", deepspeed.DsSource], list[str]]
# The DeepSpeed rules a file named by the command passes (not the image trainer's:
# the script is the user's).
FILE_ERRORS: tuple[DsCheck, ...] = (
    deepspeed.ds_batch,
    deepspeed.ds_zero_stage,
    deepspeed.ds_precision,
    deepspeed.ds_optimizer,
    deepspeed.ds_scheduler,
    deepspeed.ds_zero_optimizer,
    deepspeed.ds_dynamic_loss_scale,
    deepspeed.ds_offload_optimizer,
)
FILE_WARNINGS: tuple[DsCheck, ...] = (deepspeed.ds_cpu_only, deepspeed.ds_offload_param)


def command_alone(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.command is None:
        return []
    given = sorted({"script", "args"} & t.model_fields_set)
    return [
        f"training.{key}: {getattr(t, key)!r} with training.command {t.command!r}; allowed: "
        f"the script and its arguments in the command alone (unset training.{key})"
        for key in given
    ]


def command_launcher(cfg: StackConfig) -> list[str]:
    t, parsed = cfg.training, cfg.training.parsed_command
    # A plain script runs under training.launcher; the model set it from a launcher's.
    if parsed is None or parsed.launcher == "python" or parsed.launcher == t.launcher:
        return []
    return [
        f"training.launcher: {t.launcher!r} but training.command runs "
        f"{shlex.join(parsed.typed)!r}; allowed: {parsed.launcher!r} or unset (the "
        "command's launcher is the run's)"
    ]


def command_script(cfg: StackConfig) -> list[str]:
    t, parsed = cfg.training, cfg.training.parsed_command
    if parsed is None or parsed.module or t.code.dir is None:
        return []
    script = PurePosixPath(parsed.target)
    if script.is_absolute():
        return []  # a path in the image, as training.script may be
    if ".." in script.parts:
        return [
            f"training.command: script {parsed.target!r} leaves training.code.dir; allowed: "
            f"a path inside {t.code.dir!r}, or an absolute path in the image"
        ]
    files = listing(code_dir(t.code.dir), t.code.exclude)
    if script.as_posix() in files:
        return []
    return [
        f"training.command: script {parsed.target!r} is not a file of training.code.dir "
        f"{t.code.dir!r} (excludes applied); allowed: one of its files, e.g. "
        f"{', '.join(sorted(p for p in files if p.endswith('.py'))[:5]) or 'train.py'}"
    ]


def secret_env(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.secret_env and t.command is None:
        return [
            f"training.secret_env: {sorted(t.secret_env)} without training.command; allowed: "
            "with a command (its environment file carries them), or unset"
        ]
    out = []
    for var, name in t.secret_env.items():
        if not _NAME.match(var) or var in LAUNCHER_ENV:
            out.append(
                f"training.secret_env: {var!r} is not a variable a rank may be given; "
                f"allowed: a name ([A-Za-z_][A-Za-z0-9_]*), none of {', '.join(LAUNCHER_ENV)}"
            )
        if name not in cfg.secret_names:
            out.append(
                f"training.secret_env.{var}: {name!r} is not a secret of the stack; allowed: "
                f"{', '.join(cfg.secret_names) or 'a name under secrets (none set)'}"
            )
    return out


def _ds_file(cfg: StackConfig) -> tuple[deepspeed.DsSource | None, list[str]]:
    return command_ds_file(cfg.training)


def command_ds_file(t: Training) -> tuple[deepspeed.DsSource | None, list[str]]:
    """The DeepSpeed config file the command names (`--deepspeed_config X`, X in the code
    dir) as the rules' source, or the problems reading it. Nothing to judge without
    one, without a code dir (the file is the image's) or for an absolute path (the
    task's)."""
    parsed = t.parsed_command
    name = parsed.deepspeed_config if parsed is not None else None
    if name is None or t.code.dir is None or PurePosixPath(name).is_absolute():
        return None, []
    shown = posixpath.join(t.code.dir, name)
    where = f"{DEEPSPEED_CONFIG_FLAG} {name!r} of training.command"
    rel = posixpath.normpath(name)
    files = listing(code_dir(t.code.dir), t.code.exclude)
    if rel not in files:
        return None, [
            f"training.command: {where} is not a file of training.code.dir {t.code.dir!r} "
            "(every rank starts in the code dir, where DeepSpeed opens it; excludes "
            "applied); allowed: a JSON file beside the script, e.g. "
            f"{', '.join(sorted(p for p in files if p.endswith('.json'))[:5]) or 'ds_config.json'}"
        ]
    try:
        ds: Any = json.loads(files[rel].read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return None, [f"{shown} ({where}): not JSON ({e}); allowed: a DeepSpeed JSON config"]
    if not isinstance(ds, dict):
        return None, [
            f"{shown} ({where}): a JSON {type(ds).__name__}; allowed: a JSON object, "
            "DeepSpeed's config"
        ]
    return deepspeed.DsSource(ds, f"{shown} ({where})", file=True), []


def ds_config_file(cfg: StackConfig) -> list[str]:
    src, problems = _ds_file(cfg)
    if src is None:
        return problems
    return [msg for check in FILE_ERRORS for msg in check(cfg, src)]


def ds_config_file_warnings(cfg: StackConfig) -> list[str]:
    src, _ = _ds_file(cfg)
    if src is None:
        return []
    return [msg for check in FILE_WARNINGS for msg in check(cfg, src)]


def deepspeed_env(cfg: StackConfig) -> list[str]:
    """`.deepspeed_env` in the code dir, line by line, as DeepSpeed's runner reads it:
    each line split on its first `=` (a blank line, or one without `=`, raises there),
    both halves stripped, and `export KEY="VALUE"` on every node (so VALUE is shell
    text inside double quotes: `$VAR` and `$(...)` expand, a `"` ends the quote). The
    launch reads the file the same way under every launcher (infra/render/command.py)."""
    t = cfg.training
    # Only a command's launch hands the file to the ranks (a launch of training.script
    # runs in the image's directory, where DeepSpeed never looks in the code dir).
    if t.code.dir is None or t.command is None:
        return []
    path = listing(code_dir(t.code.dir), t.code.exclude).get(DEEPSPEED_ENV_FILE)
    if path is None:
        return []
    shown = posixpath.join(t.code.dir, DEEPSPEED_ENV_FILE)
    return [
        f"{shown} line {n}: {line!r} {why}"
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if (why := _env_line(line))
    ]


def _env_line(line: str) -> str:
    """What is wrong with one `.deepspeed_env` line ('' when nothing)."""
    key, sep, value = line.partition("=")
    if not sep:
        return (
            "has no '=' (DeepSpeed's runner raises on it; a blank line too); allowed: "
            "KEY=VALUE lines only, no blank or comment lines"
        )
    if not _NAME.match(key):
        return f"names {key!r}; allowed: a variable name ([A-Za-z_][A-Za-z0-9_]*) before '='"
    if key in LAUNCHER_ENV:
        return (
            f"sets {key}, which the launcher sets per rank; allowed: any variable except "
            f"{', '.join(LAUNCHER_ENV)}"
        )
    if value != value.strip():
        return "has spaces around its value (DeepSpeed strips them); allowed: none"
    if _bare_quote(value):
        return (
            'has a " in its value, which ends the double quotes DeepSpeed puts the value '
            'in; allowed: the value unquoted (`$VAR` and `$(...)` expand), \\" for a quote'
        )
    return ""


def _bare_quote(value: str) -> bool:
    """Whether `value` has a `"` no backslash escapes."""
    escaped = False
    for ch in value:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            return True
    return False
