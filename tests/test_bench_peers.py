"""Which upstream Go CCMs the benchmark runs beside polyccm (issue 33): each provider's, found
by polyccm_testing.peers as the switch tests find it, and skipped with one line saying why
where this machine does not have it (CI cannot fetch GCE's, DigitalOcean's or Metal's
sources)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UNBUILDABLE = {
    "gce": "gce-cloud-controller-manager-v36.3.8",
    "digitalocean": "digitalocean-cloud-controller-manager-v0.1.68",
    "packet": "equinix-metal-cloud-controller-manager-38d15e2",
}


@pytest.fixture(autouse=True)
def _bench_importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    sys.path.insert(0, str(ROOT))
    monkeypatch.setenv("POLYCCM_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("GCE", "DIGITALOCEAN", "PACKET", "AWS"):
        monkeypatch.delenv(f"POLYCCM_PEER_{name}", raising=False)
    yield
    sys.path.remove(str(ROOT))


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("provider", sorted(UNBUILDABLE))
def test_an_absent_upstream_peer_is_skipped_with_one_line(provider: str) -> None:
    from bench.cli import peers_for

    ccms, skipped = peers_for(provider, no_peers=False)
    assert ccms == []
    (reason,) = skipped
    assert "\n" not in reason
    assert reason.startswith(f"{provider} peer skipped: {UNBUILDABLE[provider]} is not in ")
    assert f"POLYCCM_PEER_{provider.upper()} is not set" in reason


@pytest.mark.parametrize("provider", sorted(UNBUILDABLE))
def test_a_cached_upstream_peer_runs_beside_polyccm(provider: str, tmp_path: Path) -> None:
    from bench.ccms import is_upstream
    from bench.cli import peers_for

    binary = _executable(tmp_path / "cache" / "bin" / UNBUILDABLE[provider])
    (ccm,), skipped = peers_for(provider, no_peers=False)
    assert skipped == []
    assert (ccm.key, ccm.binary, ccm.identity) == (f"{provider}-go", binary,
                                                   f"bench-{provider}-ccm")  # fmt: skip
    assert is_upstream(ccm.key) and ccm.calls_cloud and not ccm.has_call_metric


def test_a_peer_named_by_its_variable_wins_and_a_bad_one_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.cli import peers_for

    mine = _executable(tmp_path / "mine" / "metal-ccm")
    monkeypatch.setenv("POLYCCM_PEER_PACKET", str(mine))
    (ccm,), _ = peers_for("packet", no_peers=False)
    assert ccm.binary == mine and ccm.label == "cloud-provider-equinix-metal 38d15e2"
    monkeypatch.setenv("POLYCCM_PEER_PACKET", str(tmp_path / "missing"))
    ccms, (reason,) = peers_for("packet", no_peers=False)
    assert ccms == [] and "POLYCCM_PEER_PACKET" in reason and "\n" not in reason


def test_no_peers_skips_every_providers_upstream_ccm(tmp_path: Path) -> None:
    from bench.cli import peers_for

    _executable(tmp_path / "cache" / "bin" / UNBUILDABLE["gce"])
    assert peers_for("gce", no_peers=True) == ([], ["Go peers (--no-peers)"])


def test_every_upstream_peer_has_an_identity_in_the_audit_log() -> None:
    from polyccm_testing.peers.builds import PEERS

    from bench.ccms import IDENTITIES

    assert {f"bench-{name}-ccm" for name in PEERS} <= set(IDENTITIES)
