"""Every resource the program registers, per committed stack, against golden files.

The golden files record what reaches the engine and shapes the state: type token,
name, parent, inputs, and the options the engine stores or acts on (dependencies,
provider, delete-before-replace, replace-on-changes, ignore-changes, aliases,
custom timeouts, secret outputs), then the outputs each component and the stack
register (`register_outputs`), what it reads (a job's stack reference), and the stack's
exports. A refactor that leaves them byte-identical upgrades a live stack as a no-op.
`DSS_UPDATE_GOLDEN=1` rewrites them.

What varies between machines and runs is replaced by a placeholder: the temporary
SSH key path, the content tags of images/ and monitoring/ (they change with every
edit there, not with the program), the pickled dynamic provider (`__provider`,
which names the code, not a value; tests/unit/infra/providers/test_legacy.py covers it).
"""

from __future__ import annotations

import copy
import json
import os
import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from infra import config
from infra.components import image as image_component
from infra.components import monitoring as monitoring_component
from infra.config import parse_job, stack_file_yaml
from infra.config.parse import load as load_config
from infra.layout import PROJECT, SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE
from tests.unit.infra.samples import ROOT, Mocks, set_stack_config, stack_config

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
# The request fields that end up in the state or steer the engine's steps. Left out:
# what only says how the SDK talks (acceptSecrets, supportsPartialValues, ...) and
# where in the source a resource was declared (sourcePosition, stackTrace).
FIELDS = (
    "custom",
    "protect",
    "dependencies",
    "provider",
    "providers",
    "propertyDependencies",
    "deleteBeforeReplace",
    "deleteBeforeReplaceDefined",
    "version",
    "ignoreChanges",
    "additionalSecretOutputs",
    "aliasURNs",
    "aliases",
    "aliasSpecs",
    "importId",
    "customTimeouts",
    "replaceOnChanges",
    "retainOnDelete",
    "deletedWith",
    "pluginDownloadURL",
    "hideDiffs",
)
SORTED_LISTS = ("dependencies",)
# Plaintext stand-ins for the committed stacks' encrypted secrets.
SECRET_VALUES = {"wandb_api_key": "golden-wandb", "hf_token": "golden-hf"}
KEY_PLACEHOLDER = "<ssh-key-file>"
STACK = "pulumi:pulumi:Stack"


def _variant(stack: str, **sections: Any) -> dict[str, Any]:
    raw = copy.deepcopy(stack_config(stack))
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


# lab8's monitoring as its variants switch it on (no committed stack does).
LAB8_MONITORING = {"enabled": True, "storage": "/var/lib/dss-lab/shared/prometheus"}
# A job planned on two of lab8's hosts past the cluster's first (as `scripts/job
# submit` writes its training).
LAB8_JOB = {"nodes": 2, "gpus_per_node": 4, "hosts": ["lab-h5", "lab-h6"], "placement": "planned"}

# Per golden file: the stack file it is made of, and the sections switched on.
# No committed stack enables monitoring; dev also gets jupyter (only lab8 has it).
VARIANTS: dict[str, dict[str, Any]] = {
    "dev": {"stack": "dev"},
    "prod": {"stack": "prod"},
    "lab8": {"stack": "lab8"},
    "dev-monitoring": {
        "stack": "dev",
        "monitoring": {"enabled": True},
        "jupyter": {"enabled": True},
    },
    "lab8-monitoring": {
        "stack": "lab8",
        "monitoring": LAB8_MONITORING,
    },
    # The launch paths no committed stack takes: one launcher per node (torchrun, and
    # deepspeed without SSH), and images built on every host (no registry).
    "dev-torchrun": {
        "stack": "dev",
        "training": {"launcher": "torchrun"},
        "image": {"registry": None},
        "monitoring": {"enabled": True},
    },
    "dev-no-ssh": {"stack": "dev", "training": {"launch_mode": "no_ssh"}},
    # Docker engines over tcp:// with client TLS (files written per test).
    "prod-tls": {"stack": "prod", "tls": True},
    # Training code synced from a directory (written per test), not the image's.
    "dev-code": {"stack": "dev", "code": True},
    # A job as a code dir and a command (training.command, written per test): each
    # launcher and launch mode, the environment file with training.env and a secret.
    "dev-command": {
        "stack": "dev",
        "command": "deepspeed train.py --deepspeed --deepspeed_config ds_config.json",
    },
    "dev-command-no-ssh": {
        "stack": "dev",
        "command": "deepspeed train.py --deepspeed --deepspeed_config ds_config.json",
        "training": {"launch_mode": "no_ssh"},
    },
    "dev-command-torchrun": {
        "stack": "dev",
        "command": ["torchrun", "--max_restarts", "0", "train.py", "--epochs", "2"],
        "training": {"launcher": "torchrun"},
    },
    "dev-command-python": {"stack": "dev", "command": "python -u -m pkg.model --x 1"},
    # A cluster stack (docs/jobs.md): no run; its idle services keep a single stack's
    # names (test_jobs_migration.py turns one into the other).
    "dev-cluster": {"stack": "dev", "kind": "cluster"},
    # A job that names its hosts (`job`: its training, as `scripts/job submit` plans
    # it) on a cluster stack of lab8's hosts with monitoring on (the stack's file as a
    # cluster): two hosts past the cluster's first, the master pinned to lab-h5, the
    # workers kept off the other training hosts, the scrape through the job's master,
    # the rank map with each rank's GPU model (`models`: lab-h6 sets none).
    "lab8-job": {
        "stack": "lab8",
        "monitoring": LAB8_MONITORING,
        "job": LAB8_JOB,
        "models": {"lab-h6": ""},
    },
    # The same job queued (it did not fit when submitted): its cluster reference and
    # its queue entry only, no service, launch or scrape.
    "lab8-job-queued": {
        "stack": "lab8",
        "monitoring": LAB8_MONITORING,
        "job": {"nodes": 2, "gpus_per_node": 4, "queued": {"revision": "0123abcd"}},
    },
    # The planned job released (its run ended): its cluster reference only, and its
    # verdict as the `run` output; no service, standby, launch or scrape.
    "lab8-job-released": {
        "stack": "lab8",
        "monitoring": LAB8_MONITORING,
        "job": {
            **LAB8_JOB,
            "released": {
                "state": "failed",
                "step": 40,
                "reason": "no training process is left; last step 40",
            },
        },
    },
}
# The keys of a variant that are not stack config sections.
SPECIAL = ("stack", "tls", "code", "command", "job", "models")
# The job variants' cluster stack, its file written per test.
JOB_CLUSTER = "lab8-cluster"
# The synced code of the `code` variants: fixed bytes, so a fixed digest.
CODE_FILES = {"train.py": "print('golden')\n", "pkg/model.py": "X = 1\n"}
CODE_PLACEHOLDER = "<code-dir>"
# The `command` variants' code dir: the tutorial's shape (a config and DeepSpeed's
# environment file beside the script).
COMMAND_FILES = {
    **CODE_FILES,
    "ds_config.json": '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2}\n',
    ".deepspeed_env": "GREETING=hello $USER\nOMP_NUM_THREADS=1\n",
}
COMMAND_TRAINING = {
    "env": {"QUOTED": 'a "b" $c'},
    "secret_env": {"WANDB_API_KEY": "wandb_api_key"},
}
TLS_PLACEHOLDER = "<tls-dir>"
# Stand-ins for the content tags of images/ and monitoring/ (12 hex digits, as real ones).
IMAGES_TAG = "1a9e5000000a"
MONITORING_TAG = "3a9e5000000b"


def _record(request: Any) -> dict[str, Any]:
    """One registration as plain, deterministically ordered JSON data."""
    full = json_format.MessageToDict(request, preserving_proto_field_name=True)
    inputs = dict(full.get("object") or {})
    provider_pickle = inputs.pop("__provider", None)
    entry: dict[str, Any] = {
        "type": request.type,
        "name": request.name,
        "parent": request.parent,
        "inputs": inputs,
    }
    if provider_pickle is not None:
        entry["__provider"] = "present" if provider_pickle else "empty"
    for field in FIELDS:
        if field in full:
            value = full[field]
            if field in SORTED_LISTS:
                value = sorted(value)
            if field == "propertyDependencies":
                value = {k: sorted(v.get("urns", [])) for k, v in value.items()}
            entry[field] = value
    return entry


def _job_stack(
    variant: dict[str, Any],
    raw: dict[str, Any],
    tmp_path: Path,
    mocks: Mocks,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """A job stack's raw config on cluster `raw`, whose stack file the program reads
    from `tmp_path`; `mocks` export what that cluster deployed (its digest that of the
    file) and run the job's tasks on its hosts."""
    models = variant.get("models", {})
    for h in raw["hosts"]:
        if h["name"] in models:
            h["gpus"] = {**h["gpus"], "model": models[h["name"]]}
    cluster = {f"{PROJECT}:{k}": v for k, v in {**raw, "kind": "cluster"}.items()}
    (tmp_path / f"Pulumi.{JOB_CLUSTER}.yaml").write_text(stack_file_yaml(cluster))
    job = {"kind": "job", "cluster": JOB_CLUSTER, "training": variant["job"]}
    cfg = parse_job(job, "unit", tmp_path)
    mocks.nodes = [h.name for h in cfg.training_hosts]
    secrets = [SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE, *cfg.secret_names]
    mocks.cluster_outputs = {
        "imageRef": f"10.213.0.1:5000/ds-train@sha256:{'ab' * 32}",
        "networkId": "cluster-network-id",
        "swarmId": "cluster-swarm-id",
        "secretRefs": {n: {"id": f"{n}-id", "name": f"{JOB_CLUSTER}-{n}"} for n in secrets},
        "clusterDigest": cfg.cluster_digest,
    }
    monkeypatch.setattr(config, "load", lambda project_dir=None: load_config(tmp_path))
    return job


def _registrations(
    variant: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent_sock: str = "/run/ssh-agent.sock",
) -> list[dict[str, Any]]:
    """Run __main__.py under mocks for one variant and return every registration
    (`agent_sock`: the SSH_AUTH_SOCK the program sees)."""
    seen: list[dict[str, Any]] = []
    # The SDK's mock monitor is untyped: its methods are wrapped as plain callables.
    original: Any = pulumi_mocks.MockMonitor.RegisterResource
    original_outputs: Any = pulumi_mocks.MockMonitor.RegisterResourceOutputs
    original_read: Any = pulumi_mocks.MockMonitor.ReadResource

    # The root stack is the SDK's, registered once per process (by the first test
    # that sets mocks): not part of what the program declares.
    def register(self: Any, request: Any) -> Any:
        if request.type != STACK:
            seen.append(_record(request))
        return original(self, request)

    def register_outputs(self: Any, request: Any) -> Any:
        outputs = json_format.MessageToDict(request.outputs, preserving_proto_field_name=True)
        if f"::{STACK}::" not in request.urn:
            entry = {"type": "<outputs>", "name": request.urn, "parent": "", "outputs": outputs}
            seen.append(entry)
        return original_outputs(self, request)

    # A resource read, not created (a job's stack reference): in the state all the same,
    # with the id it is read by.
    def read(self: Any, request: Any) -> Any:
        full = json_format.MessageToDict(request, preserving_proto_field_name=True)
        seen.append({**_record(request), "read": request.id, "inputs": full.get("properties", {})})
        return original_read(self, request)

    monkeypatch.setattr(pulumi_mocks.MockMonitor, "RegisterResource", register)
    monkeypatch.setattr(pulumi_mocks.MockMonitor, "ReadResource", read)
    monkeypatch.setattr(pulumi_mocks.MockMonitor, "RegisterResourceOutputs", register_outputs)
    exports: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exports.__setitem__(name, value))
    # Without a key file the launch connects through the operator's agent (prod).
    monkeypatch.setenv("SSH_AUTH_SOCK", agent_sock)
    # Content tags hash the build contexts, git-ignored staging included (images/
    # .wheelhouse exists only after images/prepare): fixed here, so that what hashes
    # a tag further (the task-spec digest of images built on every host) is the same
    # on every machine.
    monkeypatch.setattr(image_component, "tree_hash", lambda root, length=12: IMAGES_TAG)
    monkeypatch.setattr(monitoring_component, "tree_hash", lambda root, length=12: MONITORING_TAG)
    mocks = Mocks()
    # The organization a file backend gives every stack (a job's stack reference
    # names its cluster's stack by it).
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack="unit", preview=False, organization="organization"
    )
    sections = {k: v for k, v in variant.items() if k not in SPECIAL}
    raw = _variant(variant["stack"], **sections)
    if variant.get("tls"):
        tls = tmp_path / "tls"
        tls.mkdir()
        for part in ("ca", "cert", "key"):
            (tls / f"{part}.pem").write_text(f"golden-{part}")
        raw["hosts"] = [
            {
                **h,
                "docker_host": f"tcp://{h['address']}:2376",
                "docker_tls": {p: str(tls / f"{p}.pem") for p in ("ca", "cert", "key")},
            }
            for h in raw["hosts"]
        ]
    if variant.get("code"):
        for rel, text in CODE_FILES.items():
            (tmp_path / "code" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "code" / rel).write_text(text)
        code = {"code": {"dir": str(tmp_path / "code")}, "script": "train.py"}
        raw["training"] = {**raw["training"], **code}
    if variant.get("command"):
        for rel, text in COMMAND_FILES.items():
            (tmp_path / "code" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "code" / rel).write_text(text)
        training = {k: v for k, v in raw["training"].items() if k not in ("script", "args")}
        code = {"code": {"dir": str(tmp_path / "code")}, "command": variant["command"]}
        raw["training"] = {**training, **code, **COMMAND_TRAINING}
    key_file = tmp_path / "id_ed25519"
    if raw.get("preflight", {}).get("ssh_private_key_file"):
        key_file.write_text("golden-key")
        raw["preflight"]["ssh_private_key_file"] = str(key_file)
    if variant.get("job"):
        # A job creates no secret: its cluster's file keeps them encrypted.
        set_stack_config(_job_stack(variant, raw, tmp_path, mocks, monkeypatch))
    else:
        names = sorted(raw.pop("secrets", {}))
        raw["secrets"] = {n: SECRET_VALUES[n] for n in names}
        set_stack_config(raw, ("secrets",))
    runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
    _sync_await(wait_for_rpcs())
    for name, value in sorted(exports.items()):
        output = pulumi.Output.from_input(value)
        resolved = {
            "value": _sync_await(output.future()),
            "secret": _sync_await(output.is_secret()),
        }
        seen.append({"type": "<export>", "name": name, "parent": "", "export": resolved})
    return seen


def _render(seen: list[dict[str, Any]], tmp_path: Path) -> str:
    text = json.dumps(
        sorted(seen, key=lambda r: (r["parent"], r["type"], r["name"])),
        indent=1,
        sort_keys=True,
    )
    tags = {
        IMAGES_TAG: "<images-tag>",
        MONITORING_TAG: "<monitoring-tag>",
        str(tmp_path / "id_ed25519"): KEY_PLACEHOLDER,
        str(tmp_path / "tls"): TLS_PLACEHOLDER,
        str(tmp_path / "code"): CODE_PLACEHOLDER,
    }
    for value, placeholder in tags.items():
        text = text.replace(value, placeholder)
    return text + "\n"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_registrations_match_golden(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every resource, its inputs and its state-shaping options are as recorded."""
    text = _render(_registrations(VARIANTS[variant], tmp_path, monkeypatch), tmp_path)
    path = GOLDEN / f"resources-{variant}.json"
    if os.environ.get("DSS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), (
        f"{path.name}: the program registers something else (DSS_UPDATE_GOLDEN=1 rewrites)"
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_dynamic_resources_carry_their_provider(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every dynamic resource sends its pickled provider, and nothing else does."""
    seen = _registrations(VARIANTS[variant], tmp_path, monkeypatch)
    for r in seen:
        if r["type"] in ("<outputs>", "<export>"):
            continue
        dynamic = r["type"] == "pulumi-python:dynamic:Resource"
        assert (r.get("__provider") == "present") == dynamic, f"{r['name']}: __provider"
