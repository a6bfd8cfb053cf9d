"""What Prometheus' files share (its configuration, infra/render/prometheus.py, and its
alert rules, infra/render/alerts.py): the jobs the rules select by, durations, and the
YAML they are written in, under one header. Pure; no Pulumi, no I/O.
"""

from __future__ import annotations

from typing import Any

import yaml

# Jobs, as alert rules and dashboards select them.
TRAIN_JOB, NODE_JOB, PROMETHEUS_JOB = "dss-train", "dss-node", "prometheus"

# The old path stays in the header: the text is part of the rendered config, which
# names the Swarm config by its content; another header would replace the config
# and restart Prometheus on a stack that changed nothing.
HEADER = "# Rendered by infra/prometheus.py from the stack config; do not edit.\n"


def seconds(n: int) -> str:
    """A Prometheus duration in seconds (`90s`)."""
    return f"{n}s"


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL), insertion order kept."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(doc: Any) -> str:
    """`doc` as Prometheus reads it: YAML, keys in insertion order, PromQL as blocks."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)
