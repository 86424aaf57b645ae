"""google-cloud-compute loads only what the provider uses: its ``compute_v1`` package imports a
client for each of its ~100 services (about 900 modules) when imported whole, seconds of CPU
which the provider paid while the first burst of nodes was being initialised."""

from __future__ import annotations

import json
import subprocess
import sys

#: The clients the provider builds (``api.client(compute_v1.XClient)`` in polyccm_gce and the
#: operation pollers of polyccm_gce.api).
USED = (
    "AddressesClient", "FirewallsClient", "ForwardingRulesClient", "GlobalOperationsClient",
    "HealthChecksClient", "InstanceGroupsClient", "InstancesClient", "ProjectsClient",
    "RegionBackendServicesClient", "RegionOperationsClient", "RoutesClient",
    "TargetPoolsClient", "ZoneOperationsClient", "ZonesClient",
)  # fmt: skip

SCRIPT = """
import json, sys
from google.oauth2.credentials import Credentials
from polyccm_gce import provider
from polyccm_gce.api import compute_client
from polyccm_gce.sdk import compute_v1

before = "google.cloud.compute_v1" in sys.modules
clients = [compute_client(getattr(compute_v1, name), "http://127.0.0.1:9", Credentials(token="t"))
           for name in json.loads(sys.argv[1])]
compute_v1.Instance(name="a"), compute_v1.ForwardingRule(name="b")
try:
    compute_v1.NoSuchName
    missing = "found"
except AttributeError:
    missing = "AttributeError"
from google.cloud.compute_v1.services.routes import RoutesClient  # a direct import works as ever
from google.cloud import compute_v1 as package
loaded = [m for m in sys.modules if m.startswith("google.cloud.compute_v1.")]
print(json.dumps({
    "before": before,
    "services": sorted({m.split(".")[4] for m in loaded if m.count(".") > 3 and "services" in m}),
    "modules": len(loaded),
    "missing": missing,
    "same_class": RoutesClient is compute_v1.RoutesClient is package.RoutesClient,
}))
"""


def test_only_the_clients_the_provider_uses_are_imported() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(USED)],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )
    found = json.loads(out.stdout)
    assert found["before"] is False  # importing the provider loads none of it
    assert found["services"] == [
        "addresses", "firewalls", "forwarding_rules", "global_operations", "health_checks",
        "instance_groups", "instances", "projects", "region_backend_services",
        "region_operations", "routes", "target_pools", "zone_operations", "zones",
    ]  # fmt: skip
    assert found["modules"] < 150, f"{found['modules']} of compute_v1's ~900 modules imported"
    assert found["missing"] == "AttributeError"
    assert found["same_class"] is True
