"""Acceptance: test_takeover.py's lost master, on the host data plane (issue 20).

The same tests, in the same order, on a 3-host lab of its own (this module's `lab3`
and `stack`): the tasks use their hosts' network, so the rank-0 address the spare
takes over with is the spare host's own, which follow.py's rebuild offers from every
host's address (not from `tasks.<service>` as on the overlay). Each test records a row
of the table `scripts/acceptance` prints, under this module's name.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.configs import on_data_plane
from harness.stack import Stack
from tests.acceptance import test_takeover as overlay
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

# Collected again here, in test_takeover.py's order, on this module's lab and stack.
lab3 = overlay.lab3
test_up_places_the_master_on_its_host = overlay.test_up_places_the_master_on_its_host
test_lost_master_resumes_on_the_spare = overlay.test_lost_master_resumes_on_the_spare
test_master_follows_back_when_the_spare_is_drained = (
    overlay.test_master_follows_back_when_the_spare_is_drained
)
test_a_relaunch_while_the_master_is_elsewhere_stops_it_there_first = (
    overlay.test_a_relaunch_while_the_master_is_elsewhere_stops_it_there_first
)
test_an_update_relaunches_and_takes_nothing_over = (
    overlay.test_an_update_relaunches_and_takes_nothing_over
)


@pytest.fixture(scope="module")
def stack(lab3: dict[str, Any], make_stack: MakeStack) -> Stack:
    """test_takeover.py's stack, its tasks on the host data plane."""
    config = on_data_plane(overlay.takeover_config(), "host")
    return make_stack("test-takeover-host", config, {"wandb_api_key": overlay.SECRET})
