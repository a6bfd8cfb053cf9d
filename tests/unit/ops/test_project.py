"""ops.project: the project's root and the Pulumi CLI driver the product's commands use
(the harness builds its throwaway stacks on the same)."""

from __future__ import annotations

import pytest

import harness
import harness.stack
from ops.project import ROOT, Pulumi, PulumiFailed, check_exit

pytestmark = pytest.mark.unit


def test_root_is_the_project() -> None:
    """ROOT holds the project file and the program's table of contents."""
    assert (ROOT / "Pulumi.yaml").is_file() and (ROOT / "__main__.py").is_file(), ROOT


def test_argv_names_the_stack_and_the_project() -> None:
    """Every command is non-interactive for one stack, from the project unless told."""
    plain = ["pulumi", "up", "--stack", "prod", "--non-interactive"]
    assert Pulumi("prod").argv("up") == [*plain, "--cwd", str(ROOT)]
    assert Pulumi("prod", cwd=None).argv("up") == plain


def test_the_harness_uses_the_product_driver() -> None:
    """The rig's ROOT and driver are the product's own objects, not copies."""
    assert harness.ROOT is ROOT
    assert harness.stack.Pulumi is Pulumi and issubclass(harness.stack.Stack, Pulumi)
    assert harness.stack.PulumiFailed is PulumiFailed and harness.stack.check_exit is check_exit
