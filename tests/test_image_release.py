"""The release side of the images (docs/release.md), checked without building one: the SBOM
written beside each archive, and the architecture an image is built for (``make image ARCH=``),
down to the command lines buildah and debootstrap are given and the refusal when this machine
cannot run a foreign architecture's programs.
"""

from __future__ import annotations

import json
import threading
import time
import tomllib
from pathlib import Path

import pytest
from polyccm_testing.images import __main__ as images_cli
from polyccm_testing.images import arch as arch_module
from polyccm_testing.images import base as base_module
from polyccm_testing.images.arch import ForeignArchUnsupported, check_emulation, host_arch
from polyccm_testing.images.base import base_key, debootstrap_command
from polyccm_testing.images.build import archive_path, bud_command
from polyccm_testing.images.sbom import sbom_path, write_sbom
from polyccm_testing.workspace import ROOT, workspace_providers

#: Each provider's cloud SDK, the distribution its image is mostly there to carry.
SDKS = {"aws": "boto3", "gce": "google-cloud-compute", "digitalocean": "pydo", "packet": "equinix"}
#: Never in an image: test runners, cloud fakes, the test kit and the emulators.
TEST_ONLY = {"pytest", "pytest-timeout", "moto", "polyccm-testing", "mypy", "ruff"}


def locked_versions() -> dict[str, str]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return {package["name"]: package["version"] for package in lock["package"]}


def test_every_provider_is_covered() -> None:
    assert set(SDKS) == set(workspace_providers())


@pytest.mark.parametrize("provider", sorted(SDKS))
def test_the_sbom_lists_the_images_locked_runtime_packages_and_no_test_one(
    provider: str, tmp_path: Path
) -> None:
    archive = archive_path(tmp_path, provider)
    sbom = write_sbom(provider, sbom_path(archive))
    assert sbom == tmp_path / f"polyccm-{provider}.cdx.json", "beside the archive, same stem"
    document = json.loads(sbom.read_text())
    assert document["bomFormat"] == "CycloneDX"
    locked = locked_versions()
    subject = document["metadata"]["component"]
    assert (subject["name"], subject["version"]) == (
        f"polyccm-{provider}",
        locked[f"polyccm-{provider}"],
    )
    listed = {component["name"]: component["version"] for component in document["components"]}
    for name in ("polyccm", SDKS[provider]):
        assert listed.get(name) == locked[name], f"{name} at uv.lock's version"
    assert not TEST_ONLY & set(listed)
    assert not [name for name in listed if name.endswith("-emulator")]
    others = {f"polyccm-{other}" for other in SDKS if other != provider}
    assert not others & set(listed), "another provider's distribution"


def test_make_sbom_refuses_an_unknown_provider_or_architecture_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert images_cli.main(["sbom", "nope", "--output", str(tmp_path)]) == 2
    assert images_cli.main(["build", "aws", "--arch", "s390x", "--output", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "polyccm images: unknown provider 'nope': PROVIDER must be one of "
        + ", ".join(workspace_providers()),
        "polyccm images: unknown architecture 's390x': ARCH must be one of amd64, arm64",
    ]
    assert not list(tmp_path.iterdir())


def foreign() -> str:
    return "arm64" if host_arch() == "amd64" else "amd64"


def test_a_foreign_architecture_without_qemu_is_refused_before_anything_is_built(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arch_module, "BINFMT", tmp_path / "binfmt_misc")
    # No buildah may run: a refusal comes before the tools, the base and the build.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert images_cli.main(["build", "aws", "--arch", foreign(), "--output", str(tmp_path)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"building {foreign()} on {host_arch()} needs qemu-user-static" in line
    assert "apt-get install qemu-user-static binfmt-support" in line
    check_emulation(host_arch(), binfmt=tmp_path / "nothing")  # native: nothing needed


def test_an_unmounted_binfmt_misc_is_named_with_the_mount_that_fixes_it(tmp_path: Path) -> None:
    """Without binfmt_misc mounted (this project's VMs boot so), installing qemu-user-static
    registers nothing: the refusal says to mount it first. Mounted, it says to install."""
    binfmt = tmp_path / "binfmt_misc"
    binfmt.mkdir()
    with pytest.raises(ForeignArchUnsupported) as unmounted:
        check_emulation(foreign(), binfmt=binfmt)
    assert f"as root, mount -t binfmt_misc binfmt_misc {binfmt}, then apt-get install" in str(
        unmounted.value
    )
    (binfmt / "register").write_text("")
    with pytest.raises(ForeignArchUnsupported) as mounted:
        check_emulation(foreign(), binfmt=binfmt)
    assert "mount -t" not in str(mounted.value)
    assert str(mounted.value).endswith(": apt-get install qemu-user-static binfmt-support")


def test_a_registered_qemu_lets_a_foreign_build_through(tmp_path: Path) -> None:
    entry = tmp_path / arch_module.ARCHES[foreign()]
    entry.write_text("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    with pytest.raises(ForeignArchUnsupported):
        check_emulation(foreign(), binfmt=tmp_path)
    entry.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    check_emulation(foreign(), binfmt=tmp_path)


def test_the_architecture_reaches_debootstrap_buildah_and_every_name() -> None:
    command = debootstrap_command("bookworm", ["python3"], Path("/r"), "http://m", "arm64")
    assert command[:3] == ["debootstrap", "--variant=minbase", "--arch=arm64"]
    assert "--arch=arm64" not in debootstrap_command("bookworm", ["python3"], Path("/r"), "m")
    bud = bud_command("gce", "localhost/polyccm-base:k", "localhost/polyccm-gce:dev-arm64", "arm64")
    assert bud[bud.index("--platform") + 1] == "linux/arm64"
    assert "--platform" not in bud_command("gce", "base", "name")
    # The host's base keeps its cache key; each asked-for architecture has its own.
    assert base_key(arch="arm64") == f"{base_key()}-arm64" != base_key(arch="amd64")
    archive = archive_path(Path("dist"), "gce", "arm64")
    assert archive == Path("dist/polyccm-gce-arm64.oci.tar")
    assert sbom_path(archive) == Path("dist/polyccm-gce-arm64.cdx.json")


def test_a_base_being_made_does_not_hold_up_a_build_whose_base_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one architecture's base is being debootstrapped (under qemu, tens of minutes), an
    image whose base is already cached (the host's) is built at once, not after it."""
    monkeypatch.setattr(base_module, "images_cache", lambda: tmp_path)
    started, go = tmp_path / "started", tmp_path / "go"
    # debootstrap of the arm64 base: says it started, then runs until the test lets it fail.
    slow = ["sh", "-c", f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 1"]
    monkeypatch.setattr(base_module, "debootstrap_command", lambda *_args: slow)
    cached = tmp_path / f"debian-{base_key(arch='amd64')}.tar"
    cached.write_bytes(b"")
    errors: list[BaseException] = []

    def make(arch: str) -> None:
        try:
            base_module.rootfs_tarball(arch=arch)
        except BaseException as error:  # noqa: BLE001 - reported by the assertions below
            errors.append(error)

    making = threading.Thread(target=make, args=("arm64",))
    making.start()
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), errors
        cached_one = threading.Thread(target=make, args=("amd64",))
        cached_one.start()
        cached_one.join(timeout=20)
        assert not cached_one.is_alive(), "the cached base waited for the other's debootstrap"
    finally:
        go.touch()
        making.join(timeout=30)
    (failed,) = errors  # the arm64 one, let fail; the cached amd64 one returned its tarball
    assert "debootstrap bookworm failed" in str(failed)
