"""infra.render.ssh: OpenSSH argv, pulumi-docker's ssh_opts, pulumi-command's pieces."""

from __future__ import annotations

import base64
import hashlib
import hmac
import shlex

import pytest

from infra.render.ssh import (
    connection_pieces,
    docker_ssh_opts,
    host_keys,
    master_argv,
    proxy_command,
    script_argv,
)
from infra.sshspec import Jump, SshSpec

pytestmark = pytest.mark.unit

SPEC = SshSpec(
    "gpu-01", user="dss", port=2222, identity_file="~/.ssh/id", known_hosts_file="~/.ssh/kh",
    strict=True, mux=True,
)  # fmt: skip
ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEd"
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ"


def _opt(argv: list[str], name: str) -> str | None:
    """The value of `-o name=...` in argv (None when absent)."""
    for i, a in enumerate(argv):
        if a == "-o" and argv[i + 1].startswith(f"{name}="):
            return argv[i + 1].split("=", 1)[1]
    return None


def test_script_argv_is_strict_batch_and_configless() -> None:
    """-F none, BatchMode, strict keys against the file, the key alone, the port."""
    argv = script_argv(SPEC)
    assert argv[:3] == ["ssh", "-F", "none"]
    assert (_opt(argv, "BatchMode"), _opt(argv, "StrictHostKeyChecking")) == ("yes", "yes")
    assert _opt(argv, "UserKnownHostsFile") == "~/.ssh/kh"
    assert argv[argv.index("-i") + 1] == "~/.ssh/id"
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[-3:] == ["dss@gpu-01", "sh", "-s"]


def test_script_argv_joins_the_master_without_starting_one() -> None:
    """A mux host's commands name the shared ControlPath with ControlMaster=no."""
    argv = script_argv(SPEC)
    assert (_opt(argv, "ControlPath"), _opt(argv, "ControlMaster")) == ("~/.ssh/dss-%C", "no")


def test_script_argv_of_a_plain_host_names_no_master() -> None:
    """A host that is not reached through a master gets no ControlPath."""
    assert _opt(script_argv(SshSpec("h", known_hosts_file="/kh")), "ControlPath") is None


def test_not_strict_checks_and_remembers_nothing() -> None:
    """strict false: StrictHostKeyChecking=no and no known_hosts written."""
    argv = script_argv(SshSpec("h", strict=False))
    assert (_opt(argv, "StrictHostKeyChecking"), _opt(argv, "UserKnownHostsFile")) == (
        "no",
        "/dev/null",
    )


def test_strict_without_a_file_uses_openssh_default_file() -> None:
    """Strict with no file names none: OpenSSH's ~/.ssh/known_hosts applies."""
    argv = script_argv(SshSpec("h", strict=True))
    assert (_opt(argv, "StrictHostKeyChecking"), _opt(argv, "UserKnownHostsFile")) == ("yes", None)


def test_server_alive_on_every_path() -> None:
    """A host that stops answering is noticed within 15 s."""
    argv = script_argv(SPEC)
    assert (_opt(argv, "ServerAliveInterval"), _opt(argv, "ServerAliveCountMax")) == ("5", "3")


def test_extra_options_are_passed_as_o() -> None:
    """ssh.options reach every path as -o Key=Value."""
    spec = SshSpec("h", options=(("Ciphers", "aes128-ctr"),))
    assert _opt(script_argv(spec), "Ciphers") == "aes128-ctr"


def test_jump_is_an_explicit_proxy_command_with_our_checks() -> None:
    """The bastion hop gets -F none, our known_hosts, strictness and key, and -W."""
    spec = SshSpec("gpu-01", user="dss", known_hosts_file="~/kh", identity_file="~/id",
                   strict=True, jump=Jump("bastion", 2022, None))  # fmt: skip
    words = shlex.split(proxy_command(spec) or "")
    assert words[:3] == ["ssh", "-F", "none"]
    assert "UserKnownHostsFile=~/kh" in words and "StrictHostKeyChecking=yes" in words
    assert words[words.index("-i") + 1] == "~/id"
    assert words[words.index("-p") + 1] == "2022" and words[words.index("-l") + 1] == "dss"
    assert words[-3:] == ["-W", "[%h]:%p", "bastion"]


def test_jump_doubles_percent_in_its_words() -> None:
    """A `%` in a path is escaped (ssh expands tokens in a ProxyCommand)."""
    spec = SshSpec("h", known_hosts_file="/k%h", strict=True, jump=Jump("b"))
    assert "UserKnownHostsFile=/k%%h" in (proxy_command(spec) or "")


def test_no_jump_no_proxy_command() -> None:
    """Without a bastion there is no ProxyCommand."""
    assert _opt(script_argv(SPEC), "ProxyCommand") is None


def test_master_argv_backgrounds_with_forward_safety() -> None:
    """The master: -f -N, ControlMaster=yes, forwards fail loudly, stale sockets replaced."""
    argv = master_argv(SPEC, "/home/u/.ssh/dss-abc")
    assert (_opt(argv, "ControlMaster"), _opt(argv, "ControlPath")) == (
        "yes",
        "/home/u/.ssh/dss-abc",
    )
    assert _opt(argv, "ExitOnForwardFailure") == "yes"
    assert _opt(argv, "StreamLocalBindUnlink") == "yes"
    assert _opt(argv, "StreamLocalBindMask") == "0177"
    assert argv[-3:] == ["-f", "-N", "dss@gpu-01"]


def test_docker_ssh_opts_share_the_master() -> None:
    """pulumi-docker's ssh_opts join (or start) the same master with the same checks."""
    opts = docker_ssh_opts(SPEC)
    assert opts[:2] == ["-F", "none"]
    assert (_opt(opts, "ControlPath"), _opt(opts, "ControlMaster")) == ("~/.ssh/dss-%C", "auto")
    assert _opt(opts, "ControlPersist") == "60"
    assert _opt(opts, "UserKnownHostsFile") == "~/.ssh/kh"
    assert "dss@gpu-01" not in opts, "the Docker CLI adds the destination itself"


def test_host_keys_plain_names_and_ports() -> None:
    """Plain entries: a name in a comma list; a non-22 port as [host]:port."""
    text = f"a,gpu-01 {ED}\n[gpu-01]:2222 {RSA}\nother {RSA}\n"
    assert (host_keys(text, "gpu-01"), host_keys(text, "gpu-01", 2222)) == ([ED], [RSA])


def test_host_keys_hashed_names() -> None:
    """A hashed entry (`|1|salt|hmac`) matches its host."""
    salt = b"0123456789abcdefghij"
    mac = hmac.new(salt, b"gpu-01", hashlib.sha1).digest()
    line = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()} {ED}\n"
    assert host_keys(line, "gpu-01") == [ED] and host_keys(line, "gpu-02") == []


def test_host_keys_skip_markers_and_comments() -> None:
    """@revoked, @cert-authority and comments are no host's key."""
    text = f"# gpu-01 {ED}\n@revoked gpu-01 {ED}\n@cert-authority gpu-01 {ED}\n"
    assert host_keys(text, "gpu-01") == []


def test_connection_pins_the_preferred_key_and_the_bastions() -> None:
    """pulumi-command: ed25519 before rsa; the proxy gets its own key and user."""
    spec = SshSpec("gpu-01", user="dss", known_hosts_file="~/kh", strict=True,
                   jump=Jump("b", 22, "j"))  # fmt: skip
    pieces = connection_pieces(spec, f"gpu-01 {RSA}\ngpu-01 {ED}\nb {RSA}\n")
    assert (pieces.host, pieces.port, pieces.user, pieces.host_key) == ("gpu-01", 22, "dss", ED)
    assert pieces.proxy == {"host": "b", "port": 22, "user": "j", "host_key": RSA}


def test_connection_without_an_entry_has_no_key() -> None:
    """No entry for the host: no key (the caller refuses the host by name)."""
    assert connection_pieces(SPEC, f"other {ED}\n").host_key is None
