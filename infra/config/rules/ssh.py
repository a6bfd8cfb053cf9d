"""Rules about reaching the hosts over SSH: the older keys agree with the `ssh:` block,
the ssh:// URLs with the SSH settings, and ssh:// hosts have their keys checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.config.ssh import (
    docker_url,
    known_hosts_source,
    port_source,
    strict_source,
    user_source,
)

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig


def _clash(key_a: str, a: Any, key_b: str, b: Any) -> list[str]:
    if a is None or b is None or a == b:
        return []
    return [
        f"{key_a}: {a!r} but {key_b}: {b!r}; allowed: one of the two, or both the same "
        f"({key_a} is the newer name and wins)"
    ]


def ssh_settings(cfg: StackConfig) -> list[str]:
    """Every SSH setting once: aliases that agree, URLs that agree, strict with a file."""
    out = _clash(
        "ssh.identity_file",
        cfg.ssh.identity_file,
        "preflight.ssh_private_key_file",
        cfg.preflight.ssh_private_key_file,
    )
    out += _clash(
        "ssh.known_hosts_file",
        cfg.ssh.known_hosts_file,
        "preflight.ssh_known_hosts_file",
        cfg.preflight.ssh_known_hosts_file,
    )
    for i, h in enumerate(cfg.hosts):
        set_ = h.model_fields_set
        out += _clash(f"hosts[{i}].ssh.user", h.ssh.user, f"hosts[{i}].ssh_user",
                      h.ssh_user if "ssh_user" in set_ else None)  # fmt: skip
        out += _clash(f"hosts[{i}].ssh.port", h.ssh.port, f"hosts[{i}].ssh_port",
                      h.ssh_port if "ssh_port" in set_ else None)  # fmt: skip
        out += _url_agrees(cfg, i)
        strict = strict_source(cfg.ssh, h, i)
        known = known_hosts_source(cfg.ssh, cfg.preflight, h, i)
        if strict.value is False and known.value is not None:
            out.append(
                f"{strict.key}: false but {known.key}: {known.value!r} for host {h.name!r}; "
                "allowed: strict host keys with a known_hosts file, or strict: false "
                "without one (no key is checked then)"
            )
    return out


def _url_agrees(cfg: StackConfig, i: int) -> list[str]:
    """An ssh:// docker_host that names a user or port says how the Docker engine is
    reached: the same as every other SSH path, or the paths would differ."""
    h = cfg.hosts[i]
    if not h.docker_host.startswith("ssh://"):
        return []
    url = docker_url(h)
    if url is None:
        return [
            f"hosts[{i}].docker_host: {h.docker_host!r} is not an ssh:// URL; allowed: "
            "ssh://[user@]host[:port]"
        ]
    out = []
    for what, got, source in (
        ("user", url.user, user_source(cfg.ssh, h, i)),
        ("port", url.port, port_source(cfg.ssh, h, i)),
    ):
        if got is not None and got != source.value:
            out.append(
                f"hosts[{i}].docker_host: {h.docker_host!r} names {what} {got!r} but "
                f"{source.key} says {source.value!r}; allowed: the same {what} in both "
                f"(one SSH connection per host), or no {what} in the URL"
            )
    return out


def ssh_hosts_known(cfg: StackConfig) -> list[str]:
    """ssh:// hosts have their host keys checked unless the stack says not to."""
    unchecked = [
        h.name
        for i, h in enumerate(cfg.hosts)
        if h.docker_host.startswith("ssh://")
        and known_hosts_source(cfg.ssh, cfg.preflight, h, i).value is None
        and strict_source(cfg.ssh, h, i).value is not False
    ]
    if not unchecked:
        return []
    return [
        f"ssh.known_hosts_file: not set, and hosts {unchecked} are reached over ssh:// "
        "with strict host keys; allowed: ssh.known_hosts_file (e.g. ~/.ssh/known_hosts, "
        "its entries from ssh-keyscan checked against each host's fingerprint, "
        "docs/operations.md), or ssh.strict: false to check no host key"
    ]


def ssh(cfg: StackConfig) -> list[str]:
    """Both rules, as one registry entry."""
    return ssh_settings(cfg) + ssh_hosts_known(cfg)
