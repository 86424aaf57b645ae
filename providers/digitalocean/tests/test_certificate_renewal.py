"""A Let's Encrypt certificate DigitalOcean renews, on the real kube-apiserver and the emulator:
the load balancer keeps the new certificate and the Service's ``certificate-id`` annotation is
rewritten to it, as upstream's recordUpdatedLetsEncryptCert does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from polyccm.kube.api import SERVICES, KubeApi
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, provider_for
from polyccm_testing.kubeobjects import events_for, make_node, wait_for
from polyccm_testing.manager import manager_options, start_manager

#: The fields of a load balancer a PUT sends back.
REQUEST = ("name", "type", "network", "network_stack", "size_unit", "forwarding_rules",
           "health_check", "sticky_sessions", "redirect_http_to_https", "enable_proxy_protocol",
           "enable_backend_keepalive", "http_idle_timeout_seconds", "droplet_ids", "vpc_uuid",
           "firewall", "disable_lets_encrypt_dns_records")  # fmt: skip


def lets_encrypt(cloud: DigitalOceanApi) -> dict[str, Any]:
    made: dict[str, Any] = cloud.ok("POST", "/v2/certificates", {
        "name": "shop", "type": "lets_encrypt", "dns_names": ["shop.example.com"],
    })["certificate"]  # fmt: skip
    return made


@pytest.mark.parametrize(("key", "old_deleted"), [(ann.CERTIFICATE_ID, True),
                                                   (ann.CERTIFICATE_NAME, False)])  # fmt: skip
def test_a_renewed_certificate_is_kept_and_the_services_annotation_follows_it(
    key: str, old_deleted: bool, control_plane: Any, kube_api: KubeApi, clean_nodes: None,
    namespace: str, do: Mapping[str, str],
) -> None:  # fmt: skip
    # DigitalOcean renews a Let's Encrypt certificate as a new one of the same name and puts it
    # on the load balancer. Upstream (loadbalancers.go:299-337@v0.1.68), given the annotation's
    # id or the first of the annotated name (findCertificateID, 1547-1566; 348-357): the load
    # balancer's certificate differs, is a Let's Encrypt one, and the other is gone (404) or of
    # the same name -> the certificate-id annotation is written with the load balancer's
    # (updateServiceAnnotation, 326-327, 334-335) before the request is built again (359), so
    # the old id is never sent back; for a name, the Service then has both, and the id wins.
    cloud = DigitalOceanApi(do)
    (droplet,) = cloud.create_droplets(1, prefix="renewal")
    make_node(kube_api, droplet["name"], tainted=False,
              provider_id=f"digitalocean://{droplet['id']}",
              addresses=(("ExternalIP", "203.0.113.7"),))  # fmt: skip
    old = lets_encrypt(cloud)
    kube_api.create(SERVICES, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shop", "annotations": {ann.TYPE: "REGIONAL",
                                                     key: old["id"] if old_deleted else "shop"}},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "https", "protocol": "TCP", "port": 443}]},
    }, namespace)  # fmt: skip
    options = manager_options("digitalocean", control_plane.kubeconfig,
                              controllers=frozenset({"service"}))  # fmt: skip
    running = start_manager(options, provider_for(do))
    try:
        service = wait_for(lambda: served(kube_api, namespace), 60, "the load balancer")
        lb_id = service["metadata"]["annotations"][ann.LOAD_BALANCER_ID]
        balancer = cloud.ok("GET", f"/v2/load_balancers/{lb_id}")["load_balancer"]
        assert [r["certificate_id"] for r in balancer["forwarding_rules"]] == [old["id"]]

        new = lets_encrypt(cloud)  # DigitalOcean renews: on the load balancer, the old deleted
        renewed = {key: balancer[key] for key in REQUEST if key in balancer}
        renewed["region"] = balancer["region"]["slug"]
        renewed["forwarding_rules"] = [{**rule, "certificate_id": new["id"]}
                                       for rule in balancer["forwarding_rules"]]  # fmt: skip
        cloud.ok("PUT", f"/v2/load_balancers/{lb_id}", renewed)
        if old_deleted:
            cloud.ok("DELETE", f"/v2/certificates/{old['id']}")
        # A user's edit has the Service ensured again.
        kube_api.patch(SERVICES, "shop", {"metadata": {"annotations": {
            ann.BACKEND_KEEPALIVE: "true"}}}, namespace)  # fmt: skip

        wait_for(lambda: annotation(kube_api, namespace) == new["id"], 60,
                 "the certificate-id annotation written")  # fmt: skip
        after = cloud.ok("GET", f"/v2/load_balancers/{lb_id}")["load_balancer"]
        assert after["enable_backend_keepalive"] is True, "the edit was not made"
        assert [r["certificate_id"] for r in after["forwarding_rules"]] == [new["id"]]
        warnings = [e for e in events_for(kube_api, namespace, "shop") if e[0] == "Warning"]
        assert warnings == []
    finally:
        running.stop()


def served(kube_api: KubeApi, namespace: str) -> dict[str, Any] | None:
    service: dict[str, Any] = kube_api.get(SERVICES, "shop", namespace)
    return service if service["status"].get("loadBalancer", {}).get("ingress") else None


def annotation(kube_api: KubeApi, namespace: str) -> str:
    service = kube_api.get(SERVICES, "shop", namespace)
    return str(service["metadata"]["annotations"].get(ann.CERTIFICATE_ID, ""))
