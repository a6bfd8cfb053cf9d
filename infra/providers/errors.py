"""What talking to a host can fail with, below every module that talks to one.

`HostError` is kept importable from infra/providers/hostops.py, where it was first.
"""

from __future__ import annotations


class HostError(Exception):
    """A host could not be reached or answered something unusable."""


class TransportError(HostError):
    """The way to a host failed, not the host's answer: ssh exited 255 (refused, timed
    out, host key unknown or changed, authentication, the jump host), the host's master
    is gone, a forward was refused, or the Docker engine's connection broke. A Docker
    APIError or NotFound is an answer, never this. The message names the host, its URL
    and what ssh said last."""

    def __init__(self, host: str, url: str, detail: str) -> None:
        self.host, self.url, self.detail = host, url, detail
        super().__init__(f"host {host} ({url}) cannot be reached over ssh: {detail}")


class EngineUnreachable(HostError):
    """A Docker engine that is not reached over ssh:// (a unix socket, tcp://) did not
    answer: its client could not be made (the engine's version request failed)."""
