"""Loud when the transport fails: which unreachable host is known lost.

A dynamic provider that cannot reach a host used to pass over it (a preview then said
"no changes" exactly when drift detection mattered). The rule (docs/ssh.md,
"Unknown is never no changes"): on a transport error for host H, ask the first manager
that answers (the leader first, then every other host's engine) for its nodes. If it
reports H as anything but `ready` (or has no such node), H is known lost: the caller
goes on as before (a lost host holds nothing the run can use; the lost-host recovery
relies on an empty plan while the host is still cut) and a warning names H. If H is
`ready`, or no manager answers, the caller raises, naming H, its URL and the last line
of what the transport said.

A Docker `APIError` (`NotFound` included) is an answer of the engine, never a
transport error: the callers keep what they did with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.providers.errors import EngineUnreachable, HostError, TransportError
from infra.providers.hostops import docker_client, node_hostname, ssh_of

LOST = "lost"
"""`node_state` of a host the swarm has no node for (removed by hand)."""


def is_transport(e: BaseException) -> bool:
    """Whether `e` says the way to a host failed (not the host's answer)."""
    from docker.errors import APIError, DockerException
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import Timeout

    if isinstance(e, APIError):
        return False
    transport = (TransportError, EngineUnreachable, RequestsConnectionError, Timeout)
    return isinstance(e, (*transport, ConnectionError, TimeoutError, DockerException))


def _managers(props: Mapping[str, Any], url: str) -> list[dict[str, Any]]:
    """The engines to ask, the leader first, each once, the unreachable one left out."""
    candidates = [props.get("leader_endpoint"), *(props.get("host_endpoints") or {}).values()]
    seen, out = {url}, []
    for ep in candidates:
        if isinstance(ep, dict) and ep.get("url") not in seen:
            seen.add(str(ep.get("url")))
            out.append(ep)
    return out


def node_state(props: Mapping[str, Any], host: str, url: str) -> str | None:
    """What the first manager that answers reports of `host`'s node: its state
    (`ready`, `down`, `disconnected`, `unknown`), LOST when it has none; None when no
    manager answers (a worker's engine refuses the nodes list: the next is asked)."""
    for ep in _managers(props, url):
        try:
            nodes = docker_client(ep, ssh_of(props, ep)).api.nodes()
        except Exception:  # not a manager, or not reachable either: ask the next
            continue
        states = [str(n.get("Status", {}).get("State", "")) for n in nodes
                  if node_hostname(n) == host]  # fmt: skip
        return states[0] if states else LOST
    return None


def last_line(e: BaseException) -> str:
    """What the transport said last: ssh's last stderr line for a TransportError."""
    text = e.detail if isinstance(e, TransportError) else str(e)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


class HostUnreachable(HostError):
    """A host the transport cannot reach and the swarm does not know to be lost."""


def known_lost(props: Mapping[str, Any], host: str, url: str, error: BaseException) -> None:
    """Return (after a warning naming `host`) when the swarm knows `host` is lost;
    else raise HostUnreachable naming the host, its URL and the transport's last word.
    Call only for a transport error (`is_transport`)."""
    import pulumi

    state = node_state(props, host, url)
    if state is not None and state != "ready":
        said = "has no node for it" if state == LOST else f"reports it {state}"
        pulumi.log.warn(f"host {host} ({url}) cannot be reached and the swarm {said}: "
                        "treated as lost (its tasks are Swarm's to move)")  # fmt: skip
        return
    why = "the swarm reports it ready" if state == "ready" else "no manager answered"
    raise HostUnreachable(
        f"host {host} ({url}) cannot be reached: {last_line(error)}; {why}, so it is not "
        "known lost and nothing read from it can be trusted: fix the way to it (ssh, "
        "its engine), or drain it (docker node update --availability drain) if it is gone"
    )


def host_named(props: Mapping[str, Any], url: str) -> str:
    """The host name whose endpoint is `url` (props' `host_endpoints`), else the URL."""
    endpoints = props.get("host_endpoints") or {}
    return next((str(n) for n, ep in endpoints.items() if ep.get("url") == url), url)


def settle(props: Mapping[str, Any], host: str, url: str, error: BaseException) -> None:
    """At a site that passed over an unreachable host: a transport error goes by the
    rule (`known_lost`); any other error (an answer) is passed over as before."""
    if is_transport(error):
        known_lost(props, host, url, error)
