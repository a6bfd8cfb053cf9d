"""infra.providers.dcgm: DCGM's diagnostic JSON (3.x and 4.x layouts) as a host fact."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from infra.providers import dcgm
from lab.hostfiles import dcgm_diag_json

pytestmark = pytest.mark.unit


def script_output(doc: Any, rc: int = 0) -> str:
    """DCGM_SCRIPT's lines for a dcgmi that printed `doc` (JSON, or text as is)."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return f"dcgm|rc={rc}\ndcgm|out={base64.b64encode(text.encode()).decode()}\n"


def test_a_passing_4x_diagnostic_has_no_failures() -> None:
    """4.x, every GPU passing: no failure, no error, the fact empty."""
    parsed = dcgm.parse_dcgm(script_output(dcgm_diag_json(8)))
    assert parsed == {"tool": True, "rc": 0, "failures": [], "error": ""}
    assert dcgm.seen_dcgm(parsed) == {"dcgm_diag_failures": []}


def test_a_failed_4x_result_names_test_gpu_and_warning() -> None:
    """4.x: the failed entity's id and its warning text."""
    out = script_output(dcgm_diag_json(8, {3: "Persistence mode for GPU 3 is disabled."}), 226)
    parsed = dcgm.parse_dcgm(out)
    assert parsed["failures"] == [
        {"test": "software", "gpu": "3", "message": "Persistence mode for GPU 3 is disabled."}
    ]
    assert dcgm.seen_dcgm(parsed) == {"dcgm_diag_failures": ["software: GPU 3"]}


def test_a_failed_3x_deployment_test_reads_its_warnings_key() -> None:
    """3.x Deployment: the text is under `warnings` twice over, gpu_id an int."""
    parsed = dcgm.parse_dcgm(script_output(dcgm_diag_json(2, {1: "pending retirement"}, 3), 226))
    assert parsed["failures"] == [
        {"test": "Page Retirement/Row Remap", "gpu": "1", "message": "pending retirement"}
    ]


def test_3x_per_gpu_results_and_a_bare_warning_string() -> None:
    """3.x Hardware: one result per GPU, gpu_id a string; before 3.3.3 `warnings` may be
    a bare string; Skip and Pass are not failures."""
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "GPU Memory",
                            "results": [
                                {"gpu_id": "0", "status": "Pass"},
                                {"gpu_id": "1", "status": "Fail", "warnings": "bad  row\n"},
                                {"gpu_id": "2", "status": "Skip"},
                            ],
                        }
                    ],
                }
            ]
        }
    }
    parsed = dcgm.parse_dcgm(script_output(doc, 226))
    assert parsed["failures"] == [{"test": "GPU Memory", "gpu": "1", "message": "bad row"}]


def test_a_runtime_error_is_no_verdict() -> None:
    """A diagnostic that could not run is an error, not a pass."""
    doc = {"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "host engine not running"}}
    parsed = dcgm.parse_dcgm(script_output(doc, 1))
    assert parsed["error"] == "the diagnostic could not run: host engine not running"
    assert dcgm.seen_dcgm(parsed) == {"dcgm_diag_failures": ["no verdict"]}
    assert "gave no verdict: the diagnostic could not run" in dcgm.dcgm_problem("h1", 1, parsed, "")


def test_text_instead_of_json_is_no_verdict() -> None:
    """dcgmi's own error text (no JSON) is named in the error."""
    parsed = dcgm.parse_dcgm(script_output("Error: unable to establish a connection\n", 255))
    assert parsed["error"].startswith("dcgmi printed no JSON (exit 255): Error: unable")


def test_a_non_zero_exit_without_a_failed_test_is_no_verdict() -> None:
    """An exit status the JSON does not explain is not taken as a pass."""
    parsed = dcgm.parse_dcgm(script_output(dcgm_diag_json(2), 245))
    assert parsed["error"] == "dcgmi exited 245 without a failed test"


def test_a_missing_tool_is_refused_with_what_to_do() -> None:
    """Asked for a diagnostic, a host without dcgmi is refused, saying what to install."""
    parsed = dcgm.parse_dcgm("dcgm|tool=missing\n")
    assert dcgm.seen_dcgm(parsed) == {"dcgm_diag_failures": ["dcgmi not found"]}
    said = dcgm.dcgm_problem("h1", 2, parsed, "drain")
    assert said.startswith("host h1: dcgmi is not installed, and preflight.dcgm_diag_level is 2")


def test_problem_names_host_level_tests_gpus_and_remedy() -> None:
    """A failed diagnostic's sentence: host, level, test, GPU, DCGM's words, the remedy."""
    parsed = dcgm.parse_dcgm(script_output(dcgm_diag_json(4, {2: "Xid 79 seen"}), 226))
    assert dcgm.dcgm_problem("h1", 1, parsed, "drain it") == (
        "host h1: `dcgmi diag -r 1` failed: software on GPU 2 (Xid 79 seen); remedy: drain it"
    )
