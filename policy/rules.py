"""Policies of the deepspeed-swarm pack, as plain validate functions.

Each `check_*` takes the resource's type and input properties (the engine's
camelCase names, e.g. `taskSpec.containerSpec.user`) plus the policy's config
and returns the violation messages, naming the property; the
`ResourceValidationPolicy` objects at the bottom wrap them for the pack
(`policy/__main__.py`). Unknown values (computed at preview time) raise the SDK's
UnknownValueError when read, which the SDK treats as "check again at update".

Enforcement is set per stack by `policy/config/<stack>.json` (`"all"`: mandatory
on prod, advisory on dev), passed with `--policy-pack-config`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import (
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
)

from infra.layout import GPU_RESOURCE, GPU_ROLES, IMAGE_TYPE, NETWORK_TYPE, SERVICE_TYPE
from infra.providers.boundary import normalize

SERVICE = SERVICE_TYPE
NETWORK = NETWORK_TYPE
IMAGE = IMAGE_TYPE
MTU_OPTION = "com.docker.network.driver.mtu"
ROOT_USERS = ("root", "0")

# Names whose literal value is a credential; a file path under /run/secrets is fine.
SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD|_PAT)$|PASSWORD", re.IGNORECASE)
SECRET_FILE_PREFIX = "/run/secrets/"
# Switches such as DSS_REQUIRE_SSH_KEY=1 are not credentials.
FLAG_VALUES = {"0", "1", "true", "false", "yes", "no", "on", "off"}
# Values that look like credentials, whatever their name.
SECRET_VALUE = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}"
    r"|\bhf_[A-Za-z0-9]{30,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bsk-[A-Za-z0-9_-]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\bglpat-[A-Za-z0-9_-]{20,}"
)
# A long opaque token: 32+ characters of one base64/hex alphabet with letters and digits.
OPAQUE = re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9+/=_-]{32,}$")
DIGEST_REF = re.compile(r"@sha256:[0-9a-f]{64}$")
CONTENT_TAG = re.compile(r"^[0-9a-f]{12,64}$")


def _get(props: Mapping[str, Any], *path: str) -> Any:
    value: Any = props
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _labels(value: Any) -> dict[str, Any]:
    """Docker labels as a dict, from the provider's `[{label, value}]` list or a map."""
    if isinstance(value, Mapping):
        return dict(value)
    return {
        str(item.get("label")): item.get("value")
        for item in value or []
        if isinstance(item, Mapping)
    }


def role(props: Mapping[str, Any]) -> str | None:
    """The `dss.role` label of a service (master/worker for the GPU services)."""
    found = _labels(props.get("labels")).get("dss.role")
    return found if isinstance(found, str) else None


def check_gpu_reservation(
    type_: str, props: Mapping[str, Any], config: Mapping[str, Any]
) -> list[str]:
    """GPU services (`dss.role` master/worker) reserve NVIDIA-GPU unless the stack is CPU-only."""
    if type_ != SERVICE or role(props) not in GPU_ROLES or config.get("cpu_only"):
        return []
    path = ("taskSpec", "resources", "reservation", "genericResources", "discreteResourcesSpecs")
    specs = _get(props, *path) or []
    counts = [
        s.split("=", 1)[1] for s in specs if isinstance(s, str) and s.startswith(f"{GPU_RESOURCE}=")
    ]
    if any(c.isdigit() and int(c) > 0 for c in counts):
        return []
    return [
        f"{'.'.join(path)} reserves no {GPU_RESOURCE} (has {list(specs)}): the scheduler "
        "would over-commit GPUs; set training.gpus_per_node or training.cpu_only"
    ]


def check_overlay_mtu(type_: str, props: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The overlay network's MTU driver option equals the configured MTU."""
    if type_ != NETWORK or props.get("driver") != "overlay":
        return []
    want = str(config["mtu"])
    got = _get(props, "options", MTU_OPTION)
    if got == want:
        return []
    return [f"options[{MTU_OPTION!r}] is {got!r}, the stack wants {want!r} (network.mtu)"]


def _named_values(type_: str, props: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(where, name, value) of every env var and label a resource carries."""
    if type_ == SERVICE:
        env = _get(props, "taskSpec", "containerSpec", "env") or {}
        for name, value in dict(env).items():
            yield "taskSpec.containerSpec.env", name, value
        for name, value in _labels(_get(props, "taskSpec", "containerSpec", "labels")).items():
            yield "taskSpec.containerSpec.labels", name, value
    for name, value in _labels(props.get("labels")).items():
        yield "labels", name, value


def secret_reason(name: str, value: Any) -> str | None:
    """Why a name/value pair leaks a secret, or None."""
    if isinstance(value, Secret):
        return "holds a Pulumi secret (mount it as a Swarm secret instead)"
    text = "" if value is None else str(value)
    if SECRET_VALUE.search(text) or OPAQUE.match(text):
        return "has a value that looks like a key or token"
    literal = text and not text.startswith(SECRET_FILE_PREFIX) and text.lower() not in FLAG_VALUES
    if literal and SECRET_NAME.search(name):
        return "is a credential name with a literal value (point it at /run/secrets/<name>)"
    return None


def check_no_secrets(type_: str, props: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """No secret value in any env var or label."""
    return [
        f"{where}[{name!r}] {reason}"
        for where, name, value in _named_values(type_, props)
        if (reason := secret_reason(str(name), value))
    ]


def check_non_root(type_: str, props: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Services run as an explicit non-root user."""
    if type_ != SERVICE:
        return []
    user = _get(props, "taskSpec", "containerSpec", "user")
    if not user:
        return [
            "taskSpec.containerSpec.user is not set: the task would run as the image's USER,"
            " which nothing checks"
        ]
    if str(user).split(":", 1)[0] in ROOT_USERS:
        return [f"taskSpec.containerSpec.user is {user!r}: tasks must not run as root"]
    return []


def check_restart_policy(
    type_: str, props: Mapping[str, Any], config: Mapping[str, Any]
) -> list[str]:
    """Training services (master/worker) set a restart policy."""
    if type_ != SERVICE or role(props) not in GPU_ROLES:
        return []
    if _get(props, "taskSpec", "restartPolicy", "condition"):
        return []
    return ["taskSpec.restartPolicy.condition is not set (training.restart_policy)"]


def image_reason(ref: str) -> str | None:
    """Why an image reference is not pinned by content, or None."""
    if DIGEST_REF.search(ref):
        return None
    last = ref.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if not tag or tag == "latest":
        return f"{ref!r} floats (`latest`): pin a digest or content tag"
    if not CONTENT_TAG.match(tag):
        return f"{ref!r} has tag {tag!r}, not a content digest or content hash tag"
    return None


def check_image_pinned(
    type_: str, props: Mapping[str, Any], config: Mapping[str, Any]
) -> list[str]:
    """Images are referenced by content digest or content tag, never `latest`."""
    if type_ == SERVICE:
        where, ref = (
            "taskSpec.containerSpec.image",
            _get(props, "taskSpec", "containerSpec", "image"),
        )
    elif type_ == IMAGE:
        where, ref = "imageName", props.get("imageName")
    else:
        return []
    reason = image_reason(str(ref or ""))
    return [f"{where}: {reason}"] if reason else []


def _policy(
    name: str, check: Any, schema: PolicyConfigSchema | None = None
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        # The engine hands numbers over as doubles (an integer MTU arrives as 9000.0):
        # normalised here, once, as the dynamic providers do.
        props, config = normalize(args.props), normalize(args.get_config())
        for message in check(args.resource_type, props, config):
            report_violation(f"{args.name}: {message}", None)

    return ResourceValidationPolicy(
        name=name, description=str(check.__doc__), validate=validate, config_schema=schema
    )


POLICIES = [
    _policy(
        "gpu-reservation",
        check_gpu_reservation,
        PolicyConfigSchema(properties={"cpu_only": {"type": "boolean", "default": False}}),
    ),
    _policy(
        "overlay-mtu",
        check_overlay_mtu,
        PolicyConfigSchema(properties={"mtu": {"type": "integer", "default": 9000}}),
    ),
    _policy("no-secrets-in-env-or-labels", check_no_secrets),
    _policy("non-root-user", check_non_root),
    _policy("restart-policy", check_restart_policy),
    _policy("image-pinned", check_image_pinned),
]
