"""DeepSpeed's own launcher: pdsh over ssh with a hostfile, and --no_ssh with a node rank."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import Docker, metrics

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

HOSTFILE = "printf 'n0 slots=1\\nn1 slots=1\\n' > /data/hostfile"


def test_deepspeed_pdsh_launcher_trains_two_nodes(dk: Docker, ssh_keys: Path) -> None:
    """`deepspeed --hostfile` on one node starts both ranks over ssh (pdsh) and trains."""
    net, vol = dk.network(), dk.volume()
    dk.sh(vol, HOSTFILE)
    n0 = dk.run("n0", "sleep", "infinity", network=net, volume=vol, secrets=ssh_keys)
    dk.run("n1", network=net, volume=vol, secrets=ssh_keys)
    time.sleep(3)  # sshd up on both
    launcher = ["--hostfile", "/data/hostfile", "--launcher", "pdsh", "--ssh_port", "2222"]
    master = ["--master_addr", "n0", "--master_port", "29510"]
    train = ["train.py", "--run", "pdsh", "--steps", "3"]
    r = dk.exec(n0, "deepspeed", *launcher, *master, *train, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    m = metrics(dk, vol, "pdsh")
    assert [x["step"] for x in m] == [1, 2, 3] and m[-1]["world_size"] == 2


def test_deepspeed_no_ssh_launcher_trains_two_nodes(dk: Docker) -> None:
    """`deepspeed --no_ssh --node_rank R` on each node trains as one job."""
    net, vol = dk.network(), dk.volume()
    dk.sh(vol, HOSTFILE)
    launcher = ["--hostfile", "/data/hostfile", "--no_ssh"]
    master = ["--master_addr", "n0", "--master_port", "29511"]
    train = ["train.py", "--run", "nossh", "--steps", "3"]
    names = [
        dk.run(
            f"n{r}",
            "deepspeed",
            *launcher,
            "--node_rank",
            str(r),
            *master,
            *train,
            network=net,
            volume=vol,
        )
        for r in (0, 1)
    ]
    codes = [dk.wait(n) for n in names]
    assert codes == [0, 0], dk.logs(names[0])[-3000:] + dk.logs(names[1])[-3000:]
    m = metrics(dk, vol, "nossh")
    assert [x["step"] for x in m] == [1, 2, 3] and m[-1]["world_size"] == 2
