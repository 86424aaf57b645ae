"""Upstream's deny-firewall flags (cmd/cloud-controller-manager/main.go:105-106@v36.3.8) on
polyccm's command line, and the cleanup the second one asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from polyccm_gce_emulator.testing import (
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
)
from polyccm_testing.opstools import run_polyccm


def test_the_deny_firewall_flag_is_refused_with_one_line(tmp_path: Path) -> None:
    # Upstream makes k8s-fw-<lb>-deny with it (gce_loadbalancer_external.go:313-317@v36.3.8);
    # polyccm does not, and says so rather than serve without it. Before: argparse's
    # "unrecognized arguments" for a command line written for upstream.
    config = tmp_path / "gce.conf"
    config.write_text("[global]\nproject-id = p\nlocal-zone = us-central1-a\n")

    result = run_polyccm(
        ["--provider=gce", f"--cloud-config={config}", "--enable-l4-deny-firewall=true"]
    )

    assert result.status == 2
    assert result.stderr == (
        "polyccm: error: --enable-l4-deny-firewall: polyccm's GCE provider does not make "
        "upstream's deny firewalls; start without it (with "
        "--enable-l4-deny-firewall-rollback-cleanup to delete those upstream made)\n"
    )


def test_the_rollback_cleanup_deletes_upstreams_deny_firewall_on_sync(
    emulator: RunningEmulator, api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:215-223@v36.3.8: without the deny flag and with the
    # cleanup one, each sync deletes k8s-fw-<lb>-deny.
    provider = gce_provider(emulator.endpoint)
    provider._cluster_id = "cafe0123"
    provider.load_balancer_impl.deny_cleanup = True
    api.create_instance("deny-a", tags=["deny"])
    lb: Any = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    api.do("POST", "global/firewalls", {
        "name": f"k8s-fw-{name}-deny", "network": f"{api.base}global/networks/default",
        "denied": [{"IPProtocol": "all"}], "sourceRanges": ["0.0.0.0/0"],
        "targetTags": ["deny"]})  # fmt: skip

    lb.ensure_load_balancer("c", service, [node_for("deny-a")])

    assert f"k8s-fw-{name}-deny" not in {f["name"] for f in api.list_all("global/firewalls")}
