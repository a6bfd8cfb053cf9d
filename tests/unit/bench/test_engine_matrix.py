"""bench.engine_matrix: the outcome of every test read from JUnit XML, one table row per engine."""

from __future__ import annotations

from pathlib import Path

from bench import engine_matrix as m

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.engine.test_stack" name="test_up_forms_swarm_with_labels" time="81.5"/>
<testcase classname="tests.engine.test_stack" name="test_second_preview_has_no_changes" time="9"/>
<testcase classname="tests.engine.test_stack" name="test_refresh_finds_no_drift" time="12"/>
<testcase classname="tests.engine.test_stack" name="test_drift_node_label" time="20"/>
<testcase classname="tests.engine.test_stack" name="test_drift_nic_mtu" time="20">
<failure message="drift not detected">...</failure></testcase>
<testcase classname="tests.engine.test_upgrade" name="test_preview_after_upgrade_is_a_no_op"
 time="1"><skipped message="no base"/></testcase>
<testcase classname="tests.engine.test_env" name="test_label_update_keeps_the_tasks[1]" time="2"/>
<testcase classname="tests.engine.test_env" name="test_label_update_keeps_the_tasks[2]" time="3">
<failure message="replaced">...</failure></testcase>
<testcase classname="tests.engine.test_faults" name="test_destroy" time="3">
<error message="fixture">...</error></testcase>
</testsuite></testsuites>
"""


def test_outcomes_read_each_case(tmp_path: Path) -> None:
    """Passed, failed, skipped and errored cases are told apart, with their seconds."""
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    out = m.outcomes(junit)
    assert out["test_up_forms_swarm_with_labels"] == ("passed", 81.5)
    assert out["test_drift_nic_mtu"][0] == "failed"
    assert out["test_preview_after_upgrade_is_a_no_op"][0] == "skipped"
    assert out["test_destroy"][0] == "error"


def test_parametrised_cases_fold_into_the_worst(tmp_path: Path) -> None:
    """The cases of one parametrised test are one outcome: the worst, their summed time."""
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert m.outcomes(junit)["test_label_update_keeps_the_tasks"] == ("failed", 5.0)


def test_table_row_names_engine_counts_and_verdicts(tmp_path: Path) -> None:
    """A row says the daemon version, the counts, the first up's time and each verdict."""
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    row = m.Row("28", 600.0, m.outcomes(junit))
    line = m.table([row]).splitlines()[2]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["28", "28.5.2", "4", "3", "1", "600", "82", "pass", "1/2", "skipped", "FAIL"]


RESTARTS = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest"><properties>
<property name="restarts.node-label" value="{&quot;tasks&quot;: 1, &quot;processes&quot;: 2}"/>
<property name="restarts.service-label" value="{&quot;tasks&quot;: 0, &quot;processes&quot;: 0}"/>
<property name="other" value="x"/>
</properties>
<testcase classname="tests.engine.test_restarts" name="test_change_restarts_no_training[x]"/>
</testsuite></testsuites>
"""


def test_restart_counts_read_from_suite_properties(tmp_path: Path) -> None:
    """Each `restarts.<change>` property is (tasks, processes); other properties are ignored."""
    junit = tmp_path / "junit.xml"
    junit.write_text(RESTARTS)
    assert m.restart_counts(junit) == {"node-label": (1, 2), "service-label": (0, 0)}


def test_restart_table_has_a_column_per_change() -> None:
    """The second table lists every change any row measured; a row without it shows '-'."""
    rows = [
        m.Row("20.10", restarts={"node-label": (1, 2), "service-label": (0, 0)}),
        m.Row("28", restarts={"service-label": (0, 0)}),
    ]
    lines = m.table(rows).splitlines()
    assert "| engine | node-label | service-label |" in lines
    assert "| 20.10 | 1/2 | 0/0 |" in lines and "| 28 | - | 0/0 |" in lines
