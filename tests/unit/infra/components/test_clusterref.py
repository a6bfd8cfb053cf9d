"""infra.components.clusterref: a job runs only on its cluster as deployed."""

from __future__ import annotations

import pytest

from infra.components.clusterref import _checked
from infra.config import ConfigError

pytestmark = pytest.mark.unit


def test_cluster_as_deployed_passes_the_value() -> None:
    """The cluster's file as read equal to its deployed digest: the value goes through."""
    assert _checked("c1", "abc", "abc", "image@sha256:1") == "image@sha256:1"


def test_undeployed_cluster_change_is_refused() -> None:
    """A cluster file that differs from the deployment is refused, naming the cluster,
    both digests and what to run first."""
    with pytest.raises(ConfigError) as e:
        _checked("c1", "abc", "def", "image@sha256:1")
    assert e.value.problems == [
        "cluster: 'c1': its stack file Pulumi.c1.yaml (hosts, network, preflight or "
        "secrets) differs from what is deployed (clusterDigest def, the file abc); "
        "allowed: a cluster as deployed. Run `pulumi up --stack c1` first, then the job"
    ]


def test_cluster_without_a_digest_is_refused() -> None:
    """A cluster deployed before it exported its digest is refused until its next up."""
    with pytest.raises(ConfigError, match="deployed before stacks exported clusterDigest"):
        _checked("c1", "abc", None, "image@sha256:1")
