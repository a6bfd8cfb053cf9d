"""Module paths that old stack states name, kept importable for good.

A dynamic resource stores its provider in the state as a dill pickle
(`__provider`), and dill pickles these classes by reference: module path and
name (`infra.hostfacts` / `HostFactsProvider`). The engine's provider process
unpickles the state's copy for `read` (refresh) and `delete`, and a no-op `up`
never rewrites it, so a stack created before the providers moved to
infra/providers/ names the old paths until each resource is next updated, and
possibly forever. `install()` makes each old path import the module the class
lives in now; tests/unit/infra/providers/test_legacy.py unpickles the fixtures
recorded from the old code.

Never remove an entry; add one whenever a provider class moves again.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

# Old module path -> the module its classes and functions live in now (same names).
ALIASES: dict[str, str] = {
    # Named by the pickles in states made before the move.
    "infra.hostfacts": "infra.providers.hostfacts",  # HostFactsProvider
    "infra.swarm": "infra.providers.swarm",  # SwarmInitProvider, SwarmNodeProvider
    "infra.launch": "infra.providers.roster",  # TaskRosterProvider
    "infra.secrets": "infra.providers.secrets",  # SshKeyPairProvider, GeneratedTokenProvider
    # Not pickled (the classes above are pickled by reference, their bases are not),
    # kept because they moved in the same change: the same guarantee for every path.
    "infra.dynamic": "infra.providers.boundary",
    "infra.hostops": "infra.providers.hostops",
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as the very module object of its new path."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # The import system keeps the module's own __name__ and __spec__ (they are
        # set), so classes still say where they live now; only sys.modules gains
        # the old key.
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths in `ALIASES`, and nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = ALIASES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder first on `sys.meta_path` (once): an old path resolves to its new
    module even if a stale file of the old name is still on disk."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
