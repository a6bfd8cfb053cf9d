"""Each lab host's fake GPUs, count and model (`lab up --gpus 8,8,4 --gpu-models ...`):
the flags, daemon.json and the fake nvidia-smi per host, lab.json and `lab status`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lab import cli, sysops
from lab import config as c
from lab import gpus as lg
from lab import hostfiles as hf
from lab import status as ls
from lab import up as lu
from lab.engines import DEFAULT_ENGINE, ENGINES
from tests.unit.golden import check_golden

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path("/lab-root")
COUNTS_ALLOWED = "allowed: one count >= 0 for every host, or a comma list of counts, one per host"
MIXED = lg.lab_gpus(3, [2, 1, 3], ["fake-a", "fake-b", "fake-a"])


def test_one_value_stands_for_every_host() -> None:
    """`--gpus 8` and one model: every host alike, as before per-host values."""
    assert lg.parse_counts("8") == 8 and lg.parse_models("fake-a") == "fake-a"
    assert lg.lab_gpus(3, 8) == lg.LabGpus((8, 8, 8), ("fake-gpu",) * 3)
    assert lg.lab_gpus(2, 4, "fake-b").models == ("fake-b", "fake-b")


def test_a_comma_list_gives_each_host_its_own() -> None:
    """`--gpus 8,8,4 --gpu-models fake-a,fake-a,fake-b`: lab-h1 first."""
    counts, models = lg.parse_counts("8,8,4"), lg.parse_models("fake-a,fake-a,fake-b")
    assert (counts, models) == ([8, 8, 4], ["fake-a", "fake-a", "fake-b"])
    gpus = lg.lab_gpus(3, counts, models)
    assert [(gpus.count(i), gpus.model(i)) for i in (1, 2, 3)] == [
        (8, "fake-a"), (8, "fake-a"), (4, "fake-b"),
    ]  # fmt: skip
    assert gpus.uniform_count is None and lg.lab_gpus(2, [4, 4]).uniform_count == 4


def no_lab_up(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """In place of `lab up` (a unit test never starts a lab)."""
    raise AssertionError(f"lab up called with {args} {kwargs}")


@pytest.mark.parametrize(
    ("hosts", "gpus", "models", "message"),
    [
        (4, "8,x", "fake-gpu", f"--gpus '8,x': 'x' is not a count; {COUNTS_ALLOWED}"),
        (2, "8,,4", "fake-gpu", f"--gpus '8,,4': '' is not a count; {COUNTS_ALLOWED}"),
        (
            4,
            "8,8,4",
            "fake-gpu",
            f"--gpus '8,8,4': 3 values for --hosts 4; {COUNTS_ALLOWED} (exactly 4, lab-h1 first)",
        ),
        (2, "-1", "fake-gpu", f"--gpus '-1': -1 is below 0; {COUNTS_ALLOWED}"),
        (2, "2,-1", "fake-gpu", f"--gpus '2,-1': -1 is below 0; {COUNTS_ALLOWED}"),
        (
            2,
            "2",
            "a,b,c",
            "--gpu-models 'a,b,c': 3 values for --hosts 2; allowed: one model for every host, "
            "or a comma list of models, one per host (exactly 2, lab-h1 first)",
        ),
        (
            2,
            "2",
            "fake-a,a b",
            "--gpu-models 'fake-a,a b': 'a b' is not a model name; allowed: letters, digits, "
            "'.', '_' and '-', starting with a letter or digit (1-63)",
        ),
        (1, "2", "-x", "--gpu-models '-x': '-x' is not a model name; allowed: letters"),
        (1, "2", "", "--gpu-models '': '' is not a model name; allowed: letters"),
    ],
)
def test_refused_flags_name_the_flag_the_value_and_what_is_allowed(
    hosts: int,
    gpus: str,
    models: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad `--gpus`/`--gpu-models` stops `lab up` before anything starts (argparse's
    exit 2), saying which flag, its value and what is allowed."""
    with pytest.raises(ValueError) as refused:
        lg.lab_gpus(hosts, lg.parse_counts(gpus), lg.parse_models(models))
    assert str(refused.value).startswith(message), refused.value
    monkeypatch.setattr(cli, "up", no_lab_up)
    argv = ["up", "--hosts", str(hosts), f"--gpus={gpus}", f"--gpu-models={models}"]
    with pytest.raises(SystemExit) as ended:
        cli.main(argv)
    assert ended.value.code == 2
    assert f"python -m lab up: error: {refused.value}" in capsys.readouterr().err


def test_the_cli_hands_up_each_hosts_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `lab up` is called with: one count and the default model without the flags
    (as before), the per-host lists with them."""
    calls: list[tuple[Any, ...]] = []

    def record(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append((args[2], kwargs["gpu_models"]))
        return {}

    monkeypatch.setattr(cli, "up", record)
    assert cli.main(["up", "--hosts", "3"]) == 0
    assert cli.main(["up", "--hosts", "3", "--gpus", "2,1,3", "--gpu-models", "a,b,a"]) == 0
    assert calls == [(2, "fake-gpu"), ([2, 1, 3], ["a", "b", "a"])]


def test_lab_json_records_them_as_before_unless_hosts_differ() -> None:
    """lab.json's `gpus` is one count where every host has it, `gpu_models` absent with
    the default model (a lab up without the flags writes the file as before); the lists
    otherwise; both read back by `lab status`."""
    assert lg.lab_gpus(2, 2).state() == {"gpus": 2}
    assert lg.lab_gpus(2, 2, "fake-a").state() == {"gpus": 2, "gpu_models": "fake-a"}
    assert MIXED.state() == {"gpus": [2, 1, 3], "gpu_models": ["fake-a", "fake-b", "fake-a"]}
    for gpus in (MIXED, lg.lab_gpus(2, 2)):
        assert lg.from_state(json.loads(json.dumps(gpus.state())), len(gpus.counts)) == gpus
    assert lg.from_state({}, 2) is None and lg.from_state({"gpus": [1, 2]}, 3) is None


def test_daemon_json_is_unchanged_for_one_count() -> None:
    """daemon.json of a host is what it was before per-host counts, byte for byte."""
    check_golden(GOLDEN / "daemon-h2.json", hf.render_daemon_json(c.LabPaths(ROOT).host(2), 3))


def test_each_host_gets_its_own_count_and_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lab up`'s files per host: the host's count in daemon.json's node-generic-resources
    and its GPU list, its model in the fake `nvidia-smi -L`."""
    monkeypatch.setattr(sysops, "cgroup_create", lambda name: None)  # no system cgroups
    lab = c.LabPaths(tmp_path)
    for i in (1, 2, 3):
        lu._host_files(lab, i, 3, MIXED, [], {}, ENGINES[DEFAULT_ENGINE])
    for i, (count, model) in enumerate([(2, "fake-a"), (1, "fake-b"), (3, "fake-a")], 1):
        hp = lab.host(i)
        daemon = json.loads(hp.daemon_json.read_text())
        uuids = c.gpu_uuids(i, count)
        assert daemon["node-generic-resources"] == [f"NVIDIA-GPU={u}" for u in uuids], i
        assert f"dsslab.gpus={count}" in daemon["labels"], i
        assert hp.gpu_list.read_text().split() == uuids, i
        listing = run(hp.bin_dir / "nvidia-smi", "-L")
        assert listing == "".join(f"GPU {g}: {model} (UUID: {u})\n" for g, u in enumerate(uuids))


def run(*argv: Path | str) -> str:
    return subprocess.run(["sh", *map(str, argv)], capture_output=True, text=True).stdout


def test_fake_nvidia_smi_names_the_model(tmp_path: Path) -> None:
    """`nvidia-smi -L` prints the host's model, exactly; the default model keeps the name
    the fake printed before models were per host."""
    hp = c.HostPaths(tmp_path, 3)
    hp.dir.mkdir()
    hp.gpu_list.write_text("GPU-a\nGPU-b\n")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(hf.render_fake_nvidia_smi(hp, "fake-b"))
    assert run(smi, "-L") == "GPU 0: fake-b (UUID: GPU-a)\nGPU 1: fake-b (UUID: GPU-b)\n"
    smi.write_text(hf.render_fake_nvidia_smi(hp))
    assert (
        run(smi, "-L") == "GPU 0: Lab Fake GPU (UUID: GPU-a)\nGPU 1: Lab Fake GPU (UUID: GPU-b)\n"
    )
    with pytest.raises(ValueError, match="'a\"b' is not a model name"):
        hf.render_fake_nvidia_smi(hp, 'a"b')


def live_hosts(*declared: int) -> dict[int, dict[str, Any]]:
    """What the daemons say: each host up, declaring `declared[i - 1]` GPUs."""
    return {
        i: {"daemon": True, "ssh": True, "declared_gpus": c.gpu_uuids(i, n)}
        for i, n in enumerate(declared, 1)
    }


def status_text(gpus: int | lg.LabGpus, live: dict[int, dict[str, Any]]) -> str:
    """`lab status`'s text: lab-h1 the swarm's manager, lab-h2's sshd not answering."""
    live[1] |= {"swarm_state": "active", "swarm_manager": True}
    live[2] |= {"ssh": False}
    st = c.status_dict(ROOT, len(live), gpus, 9100, live, registry_up=True)
    nodes = [{"state": "ready"}, {"state": "down"}]
    st.update(up=True, engine="28", server_versions=["28.5.2"], swarm_nodes=nodes)
    return ls.render_text(st)


def test_status_json_gives_each_hosts_count_and_model() -> None:
    """`lab status --json`: per host `gpus` and `gpu_model` with its UUIDs; the lab-wide
    `gpus_per_host` only where every host has the same count."""
    st = c.status_dict(ROOT, 3, MIXED, 9100)
    got = [(h["name"], h["gpus"], h["gpu_model"], h["gpu_uuids"]) for h in st["hosts"]]
    assert got == [
        ("lab-h1", 2, "fake-a", c.gpu_uuids(1, 2)),
        ("lab-h2", 1, "fake-b", c.gpu_uuids(2, 1)),
        ("lab-h3", 3, "fake-a", c.gpu_uuids(3, 3)),
    ]
    assert st["gpus_per_host"] is None
    plain = c.status_dict(ROOT, 2, 2, 9100)
    assert plain["gpus_per_host"] == 2
    assert [(h["gpus"], h["gpu_model"]) for h in plain["hosts"]] == [(2, "fake-gpu")] * 2


def test_status_text_adds_models_only_where_given() -> None:
    """The table gains a model column where a host's model is not the default; without
    `--gpu-models` it is printed as before, byte for byte."""
    check_golden(GOLDEN / "status.txt", status_text(2, live_hosts(2, 2)))
    check_golden(GOLDEN / "status-models.txt", status_text(MIXED, live_hosts(2, 1, 3)))


def test_status_reads_each_hosts_values_from_lab_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lab status` reports what lab.json records per host; a lab.json from before
    per-host models, the default model; none at all, the daemons' count."""
    live = live_hosts(2, 1, 3)
    monkeypatch.setattr(ls, "_host_live", lambda lab, i: live[i])
    monkeypatch.setattr(sysops, "tcp_open", lambda *a, **k: False)  # never the real lab
    monkeypatch.setattr(sysops, "netns_list", lambda prefix: ["h1", "h2", "h3"])
    state = c.LabPaths(tmp_path).state

    def reported(doc: dict[str, Any] | None) -> list[tuple[int, str]]:
        state.unlink(missing_ok=True)
        if doc is not None:
            state.write_text(json.dumps(doc))
        return [(h["gpus"], h["gpu_model"]) for h in ls.status(tmp_path)["hosts"]]

    assert reported({"hosts": 3, **MIXED.state()}) == [(2, "fake-a"), (1, "fake-b"), (3, "fake-a")]
    assert reported({"hosts": 3, "gpus": 2}) == [(2, "fake-gpu")] * 3
    assert reported(None) == [(3, "fake-gpu")] * 3
