"""Reading the stack: raw engine values -> a validated StackConfig, or every problem at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infra.config.jobs import job_config
from infra.config.models.stack import CONFIG_KEYS, StackConfig
from infra.layout import PROJECT


class ConfigError(Exception):
    """A stack configuration that cannot be applied; one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid {PROJECT} stack configuration:\n{lines}")


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _format_errors(err: ValidationError) -> list[str]:
    problems: list[str] = []
    for e in err.errors(include_url=False):
        loc = _format_loc(tuple(e["loc"]))
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "value_error" and not loc:
            # Cluster-wide rules already name their keys, one per line.
            problems.extend(msg.splitlines())
            continue
        got = e.get("input")
        shown = "" if isinstance(got, dict | list) or e["type"] == "missing" else f" (got {got!r})"
        problems.append(f"{loc}: {msg}{shown}")
    return problems


def parse_stack_config(raw: dict[str, Any], secret_keys: set[str] | None = None) -> StackConfig:
    """Validate raw stack config values (keys without the project prefix).

    `secret_keys` are the top-level keys the engine says are secret; the values
    under `secrets` must be among them, or the stack file holds them in plaintext.
    Raises `ConfigError` listing every problem.
    """
    problems: list[str] = []
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        problems.append(
            f"{unknown[0]}: unknown config key {PROJECT}:{unknown[0]}; allowed: "
            + ", ".join(f"{PROJECT}:{k}" for k in CONFIG_KEYS)
        )
    secrets = raw.get("secrets") or {}
    if not isinstance(secrets, dict):
        problems.append("secrets: must be an object of name -> value")
        secrets = {}
    if secrets and "secrets" not in (secret_keys or set()):
        problems.append(
            f"secrets: {sorted(secrets)} are stored in plaintext in the stack file; allowed: "
            f"only encrypted values, set with `pulumi config set --secret --path "
            f"'secrets.<name>' <value>`"
        )
    data = {k: v for k, v in raw.items() if k in CONFIG_KEYS and k != "secrets"}
    data["secret_names"] = sorted(secrets)
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as e:
        problems.extend(_format_errors(e))
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return cfg


def parse_job(job: dict[str, Any], stack: str, project_dir: Path) -> StackConfig:
    """Validate job stack `stack` (its raw values `job`) with its cluster's stack file in
    `project_dir` (infra/config/jobs.py). Raises `ConfigError` listing every problem."""
    raw, secret_keys, problems = job_config(job, stack, project_dir)
    if problems:
        raise ConfigError(problems)
    return parse_stack_config(raw, secret_keys)


def _value(text: str | None) -> Any:
    """A config value as the engine passed it: JSON (objects, lists, numbers), else the
    plain string (`kind: cluster`)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def load(project_dir: Path | None = None) -> tuple[StackConfig, dict[str, Any]]:
    """Read the current stack's config from the engine (a job stack's with its
    cluster's stack file in `project_dir`, infra/config/jobs.py).

    Returns the validated config and the secret values (still plain Python
    values: the caller wraps each in `pulumi.Output.secret` at once; none for a job,
    which creates no secret).
    """
    import pulumi
    from pulumi.runtime import config as runtime_config

    # Every key the engine passed in our namespace, so a typo is reported, not ignored.
    present = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    names = {k.split(":", 1)[1] for k in present if k.startswith(f"{PROJECT}:")}
    cfg = pulumi.Config(PROJECT)
    raw: dict[str, Any] = {name: _value(cfg.get(name)) for name in names}
    secret_keys = {n for n in names if runtime_config.is_config_secret(f"{PROJECT}:{n}")}
    values = dict(raw.get("secrets") or {})
    try:
        if raw.get("kind") == "job":
            parsed = parse_job(raw, pulumi.get_stack(), project_dir or Path.cwd())
            values = {}
        else:
            parsed = parse_stack_config(raw, secret_keys)
    except ConfigError as e:
        # A RunError is reported by the engine as its message alone, without a
        # traceback: the key, the value and what is allowed is all a user needs.
        raise pulumi.RunError(str(e)) from None
    # Suspicious but valid: shown in the preview, the update goes on.
    for warning in parsed.warnings():
        pulumi.log.warn(warning)
    return parsed, values
