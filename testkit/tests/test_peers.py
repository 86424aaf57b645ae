"""polyccm_testing.peers: where an upstream CCM is found without building it, and the
environment a peer runs in (loopback only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from polyccm_testing.devenv.binaries import BinaryError
from polyccm_testing.peers.builds import PEERS, peer_binary
from polyccm_testing.peers.run import aws_environment, loopback_environment


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_a_peer_is_found_in_the_cache_by_binary_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLYCCM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("POLYCCM_PEER_GCE", raising=False)
    assert peer_binary("gce") is None
    cached = _executable(tmp_path / "bin" / "gce-cloud-controller-manager-v36.3.8")
    assert peer_binary("gce") == cached


def test_the_environment_names_a_peer_before_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLYCCM_CACHE_DIR", str(tmp_path))
    _executable(tmp_path / "bin" / "digitalocean-cloud-controller-manager-v0.1.68")
    mine = _executable(tmp_path / "mine" / "do-ccm")
    monkeypatch.setenv("POLYCCM_PEER_DIGITALOCEAN", str(mine))
    assert peer_binary("digitalocean") == mine
    monkeypatch.setenv("POLYCCM_PEER_DIGITALOCEAN", str(tmp_path / "missing"))
    with pytest.raises(BinaryError, match="POLYCCM_PEER_DIGITALOCEAN"):
        peer_binary("digitalocean")


def test_every_provider_has_a_peer_with_its_source() -> None:
    assert set(PEERS) == {"aws", "digitalocean", "gce", "packet"}
    assert all(peer.version in peer.source for peer in PEERS.values())
    assert [name for name, peer in PEERS.items() if peer.buildable] == ["aws"]
    with pytest.raises(ValueError, match="no upstream peer for 'azure'"):
        peer_binary("azure")


def test_a_peer_reaches_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("AWS_PROFILE", "production")
    env = aws_environment(
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "x"},
        region="us-east-1",
    )
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert "AWS_EC2_METADATA_SERVICE_ENDPOINT" not in env
    full = loopback_environment(env)
    assert full["HTTPS_PROXY"] == "" and "AWS_PROFILE" not in full
    with pytest.raises(ValueError, match="not a loopback address"):
        loopback_environment({"AWS_ENDPOINT_URL": "https://ec2.us-east-1.amazonaws.com"})
