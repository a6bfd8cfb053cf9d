"""Stack files (`Pulumi.<stack>.yaml`) as tests, benches and the lab write and read them."""

from __future__ import annotations

from typing import Any

import yaml

from infra.layout import PROJECT


class _StackFileDumper(yaml.SafeDumper):
    """Quotes every string a YAML 1.2 reader (Pulumi's) would take for a number:
    PyYAML (YAML 1.1) writes `1e-3` bare, and Pulumi then hands the program 0.001."""


def _quoted_if_numeric(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    try:
        float(value)
    except ValueError:
        return dumper.represent_str(value)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


_StackFileDumper.add_representer(str, _quoted_if_numeric)


def stack_file_yaml(config: dict[str, Any]) -> str:
    """A `Pulumi.<stack>.yaml` holding `config` (namespaced keys), every value read
    back by Pulumi with the type it has here (tests and benches write stack files)."""
    return yaml.dump({"config": config}, Dumper=_StackFileDumper, sort_keys=False)


def stack_file_values(text: str) -> dict[str, Any]:
    """The raw `deepspeed-swarm:*` values of a stack file's text, prefix stripped (the
    inverse of `stack_file_yaml`; secrets stay as the file holds them)."""
    prefix = f"{PROJECT}:"
    config = yaml.safe_load(text)["config"]
    return {k.removeprefix(prefix): v for k, v in config.items() if k.startswith(prefix)}
