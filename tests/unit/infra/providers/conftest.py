"""Fixtures the provider tests share: the fake `ssh` (fakessh.py)."""

from tests.unit.infra.providers.fakessh import fake_ssh

__all__ = ["fake_ssh"]
