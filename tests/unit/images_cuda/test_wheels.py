"""images-cuda/wheels.py: the lock's format, matching cached files, pip's target tags."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import wheels

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
H1, H2 = "a" * 64, "b" * 64
TORCH = "torch-2.6.0-cp313-cp313-manylinux1_x86_64.whl"


def test_parse_lock_joins_continuation_lines() -> None:
    """A pin split over lines with backslashes reads as one pin with all its hashes."""
    text = f"# header\ntorch==2.6.0 \\\n    --hash=sha256:{H1} \\\n    --hash=sha256:{H2}\n"
    assert wheels.parse_lock(text) == [wheels.Pin("torch", "2.6.0", (H1, H2))]


def test_parse_lock_normalizes_names() -> None:
    """Names are compared as PEP 503 spells them (underscores, dots and case folded)."""
    [pin] = wheels.parse_lock(f"Nvidia_CUBLAS.cu12==12.4.5.8 --hash=sha256:{H1}\n")
    assert pin.name == "nvidia-cublas-cu12"


def test_parse_lock_refuses_a_pin_without_hash() -> None:
    """A requirement without a sha256 is refused, naming the line."""
    with pytest.raises(ValueError, match=re.escape("'numpy==2.2.4'")):
        wheels.parse_lock("numpy==2.2.4\n")


def test_parse_lock_refuses_an_unpinned_requirement() -> None:
    """A range instead of `==` is refused: the lock pins one version."""
    with pytest.raises(ValueError, match="not a pinned requirement"):
        wheels.parse_lock(f"numpy>=2 --hash=sha256:{H1}\n")


def test_pin_line_round_trips() -> None:
    """A pin's requirements line parses back to the same pin."""
    pin = wheels.Pin("torch", "2.6.0", (H1, H2))
    assert wheels.parse_lock(pin.line()) == [pin]


def test_dist_key_of_a_wheel_with_a_compressed_tag_set() -> None:
    """A wheel with several platform tags gives its normalized name and version."""
    name = "markupsafe-3.0.4-cp313-cp313-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    assert wheels.dist_key(name) == ("markupsafe", "3.0.4")


def test_dist_key_of_an_sdist() -> None:
    """An sdist's name may contain dashes; the version is after the last one."""
    assert wheels.dist_key("py-cpuinfo-9.0.0.tar.gz") == ("py-cpuinfo", "9.0.0")


def test_dist_key_of_another_file_is_none() -> None:
    """Files that are neither wheels nor sdists (pip's temp files, notes) are ignored."""
    assert wheels.dist_key("requirements.txt") is None


def test_pip_target_args_cover_torch_wheel_tag() -> None:
    """The platforms include manylinux1, the tag of torch 2.6.0's wheel, and the target glibc."""
    args = wheels.pip_target_args()
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert {"manylinux1_x86_64", "manylinux2014_x86_64", "manylinux_2_41_x86_64"} <= set(platforms)


def test_pip_target_args_stop_at_the_target_glibc() -> None:
    """No manylinux tag newer than the image's glibc: such a wheel would not load there."""
    args = wheels.pip_target_args(glibc=(2, 28))
    minors = [int(m) for m in re.findall(r"manylinux_2_(\d+)_", " ".join(args))]
    assert max(minors) == 28


def test_pip_target_args_name_the_image_python() -> None:
    """Wheels are chosen for the image's CPython ABI, not the host's."""
    args = wheels.pip_target_args(python=(3, 13))
    assert args[args.index("--python-version") + 1] == "3.13"
    assert args[args.index("--abi") + 1] == "cp313"


def test_match_finds_the_file_with_a_locked_digest() -> None:
    """The cached file with the pin's name, version and a listed sha256 satisfies it."""
    pin = wheels.Pin("torch", "2.6.0", (H1,))
    found, missing = wheels.match([pin], {TORCH: H1, "numpy-2.2.4-cp313-cp313-x.whl": H1})
    assert (found, missing) == ({pin: TORCH}, [])


def test_match_reports_a_file_with_another_digest_as_missing() -> None:
    """A cached file whose sha256 is not in the lock (corrupt, other build) satisfies nothing."""
    pin = wheels.Pin("torch", "2.6.0", (H1,))
    assert wheels.match([pin], {TORCH: H2}) == ({}, [pin])


def test_render_lock_parses_back() -> None:
    """The rendered lock reads back as one pin per file, sorted by name."""
    text = wheels.render_lock({TORCH: H1, "einops-0.8.1-py3-none-any.whl": H2})
    assert wheels.parse_lock(text) == [
        wheels.Pin("einops", "0.8.1", (H2,)),
        wheels.Pin("torch", "2.6.0", (H1,)),
    ]


def test_render_lock_refuses_two_files_of_one_package() -> None:
    """Two files of one package (two platforms) would make the lock ambiguous: refused."""
    other = "torch-2.6.0-cp313-cp313-manylinux_2_28_aarch64.whl"
    with pytest.raises(ValueError, match="more than one file for torch"):
        wheels.render_lock({TORCH: H1, other: H2})


def test_committed_lock_pins_deepspeed_dependencies_as_the_cpu_variant() -> None:
    """Every pin of images/requirements-deps.txt is in the CUDA lock at the same version."""
    locked = {p.name: p.version for p in wheels.parse_lock(wheels.LOCK.read_text())}
    deps = (ROOT / "images" / "requirements-deps.txt").read_text()
    for name, version in re.findall(r"^([\w.-]+)==(\S+)", deps, re.M):
        assert locked.get(wheels.normalize(name)) == version, name


def test_committed_lock_pins_the_torch_of_requirements_in() -> None:
    """The lock's torch is the version requirements.in asks for, with one file's hash."""
    [want] = re.findall(r"^torch==(\S+)", wheels.LOCK_INPUT.read_text(), re.M)
    [torch] = [p for p in wheels.parse_lock(wheels.LOCK.read_text()) if p.name == "torch"]
    assert (torch.version, len(torch.hashes)) == (want, 1)


def test_cuda_runtime_base_has_what_the_dockerfile_would_apt_get() -> None:
    """The CUDA runtime base lists each package images/Dockerfile's runtime stage checks for
    (a missing one would send the build to apt-get, and build containers have no network)."""
    dockerfile = (ROOT / "images" / "Dockerfile").read_text()
    [checked] = re.findall(r"for p in ([a-z0-9 -]+); do", dockerfile)
    listed = (ROOT / "images-cuda" / "packages-runtime.txt").read_text()
    packages = {line.split("#")[0].strip() for line in listed.splitlines()}
    assert set(checked.split()) <= packages


def test_cuda_bases_leave_out_debian_torch() -> None:
    """Neither CUDA base installs Debian's CPU torch: the venv's CUDA torch is the only one."""
    for name in ("packages-runtime.txt", "packages-build.txt"):
        listed = (ROOT / "images-cuda" / name).read_text()
        packages = {line.split("#")[0].strip() for line in listed.splitlines()}
        assert not packages & {"python3-torch", "libtorch-dev"}, name


def test_committed_lock_agrees_with_the_jupyter_closure() -> None:
    """A package in both the CUDA lock and images/requirements-jupyter.txt has one version
    (the image's build stage installs the closure --no-deps over the locked venv)."""
    locked = {p.name: p.version for p in wheels.parse_lock(wheels.LOCK.read_text())}
    closure = (ROOT / "images" / "requirements-jupyter.txt").read_text()
    pins = {wheels.normalize(n): v for n, v in re.findall(r"^([\w.-]+)==(\S+)", closure, re.M)}
    assert {n: (v, locked[n]) for n, v in pins.items() if n in locked and locked[n] != v} == {}
