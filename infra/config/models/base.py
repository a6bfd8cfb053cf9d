"""What every config model shares: strictness, docstrings as documentation, port and MTU types."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

# The MTU range a Linux NIC and Docker's overlay driver accept; 9216 is the
# largest jumbo frame common switches carry.
MTU_MIN, MTU_MAX = 1280, 9216

Port = Annotated[int, Field(ge=1, le=65535)]
Mtu = Annotated[int, Field(ge=MTU_MIN, le=MTU_MAX)]


# Every model's config (each model module subclasses BaseModel with it, so that
# linters see the pydantic base): unknown keys are typos until proven otherwise,
# refuse them. Field docstrings are the documentation: docs/configuration.md's
# tables are generated from them (`python -m infra.config`), a test keeps them equal.
MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
