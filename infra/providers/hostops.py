"""Talking to hosts from inside dynamic providers: SSH commands and Docker API clients.

Dynamic providers are pickled into the state and run in a separate process, so
clients are created inside each call from plain inputs (never held on the
provider object).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from infra.providers import transport
from infra.providers.errors import EngineUnreachable
from infra.providers.errors import HostError as HostError
from infra.providers.errors import TransportError as TransportError
from infra.render.ssh import script_argv
from infra.sshspec import SshSpec, url_spec

SSH_TIMEOUT_S = 20
# At most this many hosts asked at once by `each` (prod: 8 hosts; the lab: 9).
PARALLEL_HOSTS = 16
T = TypeVar("T")
U = TypeVar("U")


def each(items: Sequence[T], fn: Callable[[T], U]) -> list[U]:
    """`fn` of every item at once, one thread each (the Docker API and SSH calls a
    provider makes per host or task wait on the network, not the CPU): the results in
    the items' order. An exception of `fn` is raised, the first in order."""
    if len(items) < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(len(items), PARALLEL_HOSTS)) as pool:
        return list(pool.map(fn, items))


# The keys of a HostFacts `ssh` input that only the SSH model writes (infra/sshspec.py):
# a target without any of them is rendered as it was before the model, exactly.
MODEL_KEYS = ("strict", "jump", "options", "persist_s", "max_per_host", "mux")


def ssh_argv(ssh: dict[str, Any]) -> list[str]:
    """`ssh` to a host, running the POSIX shell script it is given on stdin.

    `ssh` holds `user`, `address`, `port` and optionally `key_file` and `known_hosts`;
    without a key file the operator's ssh agent and config choose the key, as for a
    plain `ssh`. The script travels on stdin, so nothing of it shows in a process list.
    A target with a newer key of the SSH model is rendered from it
    (infra/render/ssh.py: `-F none`, the jump host, the host's shared master).
    """
    if any(k in ssh for k in MODEL_KEYS):
        return script_argv(SshSpec.from_props(ssh))
    key = ssh.get("key_file")
    argv = [
        "ssh",
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={SSH_TIMEOUT_S}",
        # Host keys are checked against `known_hosts` when the stack names one;
        # the lab's hosts make new keys on every `lab up`, so it names none.
        "-o", "StrictHostKeyChecking=" + ("yes" if ssh.get("known_hosts") else "no"),
        "-o", "UserKnownHostsFile=" + str(ssh.get("known_hosts") or "/dev/null"),
        "-o", "LogLevel=ERROR",
        "-p", str(ssh.get("port", 22)),
    ]  # fmt: skip
    if key:
        argv += ["-i", key, "-o", "IdentitiesOnly=yes"]
    return [*argv, f"{ssh.get('user', 'root')}@{ssh['address']}", "sh", "-s"]


def ssh_run(ssh: dict[str, Any], script: str, timeout: int = 60) -> str:
    """Run a POSIX shell script on a host over SSH (`ssh_argv`) and return its stdout.
    A target the SSH model wrote goes through infra/providers/transport.py (the host's
    master when it has one; TransportError when ssh itself fails); an older one runs as
    it always did."""
    if any(k in ssh for k in MODEL_KEYS):
        return transport.run_script(SshSpec.from_props(ssh), script, timeout)
    argv = ssh_argv(ssh)
    try:
        proc = subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise HostError(f"ssh {ssh['address']}: no answer within {timeout}s") from None
    if proc.returncode != 0:
        raise HostError(
            f"ssh {ssh.get('user', 'root')}@{ssh['address']}:{ssh.get('port', 22)} "
            f"exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
        )
    return proc.stdout


SSH_HOSTS = "ssh_hosts"
"""A dynamic resource's input: per ssh:// endpoint URL, its host's SSH settings
(`SshSpec.props`); only in the inputs of stacks with ssh:// hosts
(infra/components/swarm.py `ssh_prop`)."""


def ssh_of(props: Mapping[str, Any], endpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The SSH settings the program gave for `endpoint`'s host (`props`' `ssh_hosts`,
    by URL); None: the URL's own (a state written before the settings were inputs)."""
    found = (props.get(SSH_HOSTS) or {}).get(str(endpoint.get("url")))
    return dict(found) if found else None


def docker_client(endpoint: dict[str, Any], ssh: dict[str, Any] | None = None) -> Any:
    """A Docker API client for one host's endpoint (`url`, optional `tls`).

    An ssh:// endpoint is reached through the host's forwarded Docker socket
    (infra/providers/transport.py: one SSH connection per host, no paramiko), with the
    host's SSH settings `ssh` (a HostFacts-style target) or, without them, what the URL
    says with strict host keys; docker-py never gets an ssh:// URL. Other endpoints are
    as they always were."""
    import docker
    from docker.tls import TLSConfig

    url = str(endpoint["url"])
    if url.startswith("ssh://"):
        spec = SshSpec.from_props(ssh) if ssh else url_spec(url)
        return transport.docker_client(url, spec)
    kwargs: dict[str, Any] = {"base_url": url, "timeout": 120}
    tls = endpoint.get("tls")
    if tls:
        kwargs["tls"] = TLSConfig(
            client_cert=(tls["cert"], tls["key"]), ca_cert=tls["ca"], verify=True
        )
    try:
        return docker.DockerClient(**kwargs)
    except Exception as e:
        # The way to the engine failed, not an answer of it (infra/providers/reach.py).
        raise EngineUnreachable(f"docker {url}: {e}") from None


def service_container(
    endpoint: dict[str, Any], service: str, ssh: dict[str, Any] | None = None
) -> Any:
    """The running container of a Swarm service's task on the host of `endpoint` (its
    SSH settings `ssh`, `ssh_of`), or None."""
    found = docker_client(endpoint, ssh).containers.list(
        filters={"label": f"com.docker.swarm.service.name={service}"}
    )
    return found[0] if found else None


def node_hostname(node: dict[str, Any]) -> str:
    """A swarm node's hostname, or "" while the manager has no description of it yet
    (a node that has only just joined has no `Description.Hostname`)."""
    return str((node.get("Description") or {}).get("Hostname") or "")


def update_config(api: Any, config_id: str, version: int, spec: Mapping[str, Any]) -> None:
    """POST /configs/{id}/update at `version` (the Engine API; docker-py's APIClient has
    no call for it): only the labels of `spec`, the config's as read, may differ. Swarm
    refuses a stale version ("update out of sequence"): a compare-and-swap."""
    url = api._url("/configs/{0}/update", config_id)
    res = api._post_json(url, data=dict(spec), params={"version": version})
    api._raise_for_status(res)
