"""NVIDIA DCGM's diagnostic on a GPU host (`dcgmi diag -r <level> -j`), where the stack
sets `preflight.dcgm_diag_level`: what the host facts run (infra/providers/hostfacts.py
appends DCGM_SCRIPT), so that a GPU DCGM fails is refused before a launch and, at
level 1, is drift while training runs.

The JSON, as dcgmi prints it (NVIDIA/DCGM dcgmi/Diag.cpp; key names in
nvvs/include/NvvsJsonStrings.h, read, not copied):

- DCGM 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category": ..., "tests":
  [{"name": ..., "results": [{"status": "Pass"|"Fail"|"Skip", "gpu_id": 0 or "0",
  "warnings": [{"warning": ...}]}]}]}]}}`; in the Deployment category a warning's text
  is under `warnings` (not `warning`), and before 3.3.3 `warnings` may be a bare string.
- DCGM 4.x: the top key is `DCGM Diagnostic`; a result names its GPU as `entity_group`
  `GPU` and `entity_id`; each test also has a `test_summary` with its status.
- A diagnostic that could not run: `runtime_error` under the top key.
dcgmi exits 226 (DCGM_ST_NVVS_ERROR) when a test fails, after printing the JSON.
Level 1 is the software and deployment checks (seconds: persistence mode, page
retirement and row remap, the driver's libraries, ...); 2 adds memory and PCIe (about
2 minutes); 3 and 4 stress the GPU for 15 minutes and more.

At a refresh the diagnostic runs again only at level 1: the higher levels load the
GPU, and a refresh runs beside a live job. Theirs is the last check's result until the
next create or update.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

# str.format()ed with {level}. The JSON travels base64-encoded on one line: nothing in
# it can pass for another fact.
DCGM_SCRIPT = r"""if command -v dcgmi >/dev/null 2>&1; then
  dcgm_out=$(dcgmi diag -r {level} -j 2>&1); echo "dcgm|rc=$?"
  echo "dcgm|out=$(printf %s "$dcgm_out" | base64 -w0)"
else
  echo "dcgm|tool=missing"
fi
"""

DCGM_KEYS = ("dcgm_diag_failures",)
TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
FAILED = frozenset({"fail", "warn"})


def parse_dcgm(text: str) -> dict[str, Any]:
    """DCGM_SCRIPT's output: whether the tool is there, its exit status, and per failed
    test and GPU what it said (`failures`: `{"test", "gpu", "message"}`), or why the
    diagnostic gave no verdict (`error`)."""
    out: dict[str, Any] = {"tool": True, "rc": 0, "failures": [], "error": ""}
    raw = ""
    for line in text.splitlines():
        tag, _, rest = line.partition("|")
        if tag != "dcgm":
            continue
        key, _, value = rest.partition("=")
        if key == "tool":
            out["tool"] = False
        elif key == "rc":
            out["rc"] = int(value) if value.strip().isdigit() else -1
        elif key == "out":
            try:
                raw = base64.b64decode(value.strip()).decode(errors="replace")
            except (binascii.Error, ValueError):
                raw = ""
    if not out["tool"]:
        return out
    try:
        doc = json.loads(raw)
    except ValueError:
        out["error"] = f"dcgmi printed no JSON (exit {out['rc']}): {' '.join(raw.split())[:200]}"
        return out
    out["failures"], out["error"] = _verdict(doc)
    if not out["failures"] and not out["error"] and out["rc"] != 0:
        out["error"] = f"dcgmi exited {out['rc']} without a failed test"
    return out


def _verdict(doc: Any) -> tuple[list[dict[str, str]], str]:
    """The failed (test, GPU, message) of a diagnostic's JSON, and a runtime error."""
    diag = next((doc[k] for k in TOP_KEYS if isinstance(doc, dict) and k in doc), None)
    if not isinstance(diag, dict):
        return [], "dcgmi's JSON has no diagnostic (neither of " + ", ".join(TOP_KEYS) + ")"
    if diag.get("runtime_error"):
        return [], f"the diagnostic could not run: {diag['runtime_error']}"
    failures: list[dict[str, str]] = []
    for category in diag.get("test_categories") or []:
        for test in category.get("tests") or []:
            name = str(test.get("name", "?"))
            for result in test.get("results") or []:
                if str(result.get("status", "")).lower() not in FAILED:
                    continue
                failures.append({"test": name, "gpu": _gpu(result), "message": _said(result)})
    return failures, ""


def _gpu(result: dict[str, Any]) -> str:
    """Which GPU a result is about (its DCGM index), "" when the result is for all."""
    if "gpu_id" in result:
        return str(result["gpu_id"])
    if result.get("entity_group", "GPU") == "GPU" and "entity_id" in result:
        return str(result["entity_id"])
    return ""


def _said(result: dict[str, Any]) -> str:
    """A result's warning texts in one line (3.x Deployment puts them under `warnings`
    twice over; before 3.3.3 `warnings` may be a string)."""
    warnings = result.get("warnings") or []
    if isinstance(warnings, str):
        texts = [warnings]
    else:
        texts = [
            str(w.get("warning") or w.get("warnings") or "") if isinstance(w, dict) else str(w)
            for w in warnings
        ]
    return " ".join(" ".join(t.split()) for t in texts if t)[:300]


def seen_dcgm(dcgm: dict[str, Any]) -> dict[str, Any]:
    """The fact in the shape of `expected`: `<test>: GPU <index>` per failure (or the
    reason there is no verdict); empty when the diagnostic passed."""
    if not dcgm.get("tool", True):
        return {"dcgm_diag_failures": ["dcgmi not found"]}
    if dcgm.get("error"):
        return {"dcgm_diag_failures": ["no verdict"]}
    return {
        "dcgm_diag_failures": sorted(
            {f"{f['test']}: GPU {f['gpu']}" if f["gpu"] else f["test"] for f in dcgm["failures"]}
        )
    }


def dcgm_problem(host: str, level: int, dcgm: dict[str, Any], remedy: str) -> str:
    """The sentence for a failed (or impossible) diagnostic: host, level, each failed
    test with its GPU and what DCGM said, the remedy."""
    if not dcgm.get("tool", True):
        text = (
            f"dcgmi is not installed, and preflight.dcgm_diag_level is {level}: install "
            "DCGM (datacenter-gpu-manager) and start nv-hostengine, or unset the level"
        )
        return f"host {host}: {text}"
    if dcgm.get("error"):
        return f"host {host}: `dcgmi diag -r {level}` gave no verdict: {dcgm['error']}"
    said = "; ".join(
        f"{f['test']}" + (f" on GPU {f['gpu']}" if f["gpu"] else "")
        + (f" ({f['message']})" if f["message"] else "")
        for f in dcgm["failures"]
    )  # fmt: skip
    text = f"`dcgmi diag -r {level}` failed: {said}"
    return f"host {host}: {text}; remedy: {remedy}" if remedy else f"host {host}: {text}"
