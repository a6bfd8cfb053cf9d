"""The configuration reference (docs/configuration.md), generated from the models and rules.

`python -m infra.config --update-docs` rewrites the tables between the markers;
a unit test keeps the committed page equal to what this generates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infra.config.models.stack import StackConfig
from infra.config.rules import RULES

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
# The names of the markers when the tables lived in README.md.
README_START, README_END = START, END


def _type_name(annotation: Any) -> str:
    """`list[infra.config.models.cluster.Host] | None` -> `list[Host] or None` (table-safe)."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"(?:[A-Za-z_]\w*\.)+(\w+)", r"\1", text)
    return text.replace("NoneType", "None").replace(" | ", " or ")


def config_reference() -> str:
    """Markdown table of every config key: key, type, default, description.

    Generated from the models, so the documented table cannot drift from the code.
    """
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]

    def walk(prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            if name == "secret_names":
                continue
            key = f"{prefix}{name}"
            ann = field.annotation
            nested = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
            item = getattr(ann, "__args__", (None,))[0] if str(ann).startswith("list[") else None
            default = "required" if field.is_required() else f"`{field.default!r}`"
            if nested is not None:
                default = "see below"
            doc = (field.description or "").replace("\n", " ").replace("|", "\\|")
            doc = " ".join(doc.split())
            rows.append(f"| `{key}` | {_type_name(ann)} | {default} | {doc} |")
            if nested is not None:
                walk(f"{key}.", nested)
            elif isinstance(item, type) and issubclass(item, BaseModel):
                walk(f"{key}[].", item)

    walk("", StackConfig)
    rows.append(
        "| `secrets.<name>` | str (secret) | none | A value mounted at /run/secrets/<name>; "
        "must be set with `pulumi config set --secret --path 'secrets.<name>'`. |"
    )
    return "\n".join(rows) + "\n"


def rules_reference() -> str:
    """Markdown table of every cross-key rule: key, error or warning, what is allowed.

    Generated from `RULES`, so the documented list of rules cannot drift from the checks.
    """
    rows = ["| key | refused or warned | rule |", "| --- | --- | --- |"]
    kinds = {"error": "error", "warning": "warning (preview)"}
    rows += [f"| `{r.key}` | {kinds[r.severity]} | {r.summary} |" for r in RULES]
    return "\n".join(rows) + "\n"


def with_reference(text: str) -> str:
    """`text` with the generated key and rule tables between its markers."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    body = f"{config_reference()}\nCross-key rules, in the order they run:\n\n{rules_reference()}"
    return f"{head}{START}\n{body}{END}{tail}"


# The generator's name when the tables lived in README.md.
readme_with_reference = with_reference


def update_docs(path: Path = DOCS_PATH) -> None:
    """Rewrite the tables of docs/configuration.md (the page must exist, with its markers)."""
    path.write_text(with_reference(path.read_text()))
