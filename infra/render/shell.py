"""Shell pieces the scripts run on hosts share (the launch, the stop, a job's scrape
config): find a service's task container on this host, and replace a file in a task
whole. Pure; no Pulumi, no I/O.
"""

from __future__ import annotations


def task_container(var: str, service: str) -> str:
    """Shell: `var` is the id of `service`'s running container on this host, or empty."""
    return (
        f'{var}=$(docker ps -q --filter "label=com.docker.swarm.service.name={service}" | head -n1)'
    )


def replace_file(path: str, executable: bool = False, shared: bool = False) -> str:
    """Shell, run in a task: its stdin becomes the file `path`, replaced whole (a reader
    sees the old file or the new one, never half of it); `executable`: mode 755.

    `shared`: other hosts' launches may write the same path at the same moment (the
    per-node launches of a command, on the shared data dir), so the temporary file is
    the writer's own (its task's host name and shell pid), not one `.new` they race on."""
    tmp = f"{path}.new.$(hostname).$$" if shared else f"{path}.new"
    mode = f" && chmod 755 {tmp}" if executable else ""
    return f"mkdir -p $(dirname {path}) && cat > {tmp}{mode} && mv {tmp} {path}"
