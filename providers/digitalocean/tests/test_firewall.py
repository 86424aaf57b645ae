"""The ``firewall`` controller (upstream's public-access firewall controller) against the real
kube-apiserver and the emulator: with ``PUBLIC_ACCESS_FIREWALL_NAME``/``_TAGS`` the named
firewall opens the NodePorts of NodePort Services (not of those annotated
``firewall-managed: "false"``) and the ports of REGIONAL_NETWORK EXTERNAL load balancers, follows
the Services as they change, and is made again when deleted by hand."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from polyccm.kube.api import SERVICES, KubeApi
from polyccm.objects import Service
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean.firewall import FIREWALL_MANAGED
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, provider_for
from polyccm_testing.controllers import provider_controllers, registered_controller
from polyccm_testing.kubeobjects import make_service, wait_for

FIREWALL = "k8s-public-access"
TAGS = "k8s:c1:worker,k8s-worker"


@contextmanager
def firewall_term(kube_api: KubeApi, provider: Any) -> Iterator[Any]:
    """The provider's ``firewall`` controller, as the plugin registers it, in a term of
    its own as the manager runs it."""
    constructor = registered_controller("digitalocean", "firewall")
    with provider_controllers(kube_api, provider, constructor) as (controller,):
        yield controller


def firewall(cloud: DigitalOceanApi) -> dict[str, Any] | None:
    found = [f for f in cloud.ok("GET", "/v2/firewalls")["firewalls"] if f["name"] == FIREWALL]
    assert len(found) <= 1, found
    return found[0] if found else None


def inbound(cloud: DigitalOceanApi) -> set[tuple[str, str, str]]:
    """(protocol, ports, sources) of each inbound rule of the firewall."""
    made = firewall(cloud) or {"inbound_rules": []}
    return {
        (r["protocol"], r["ports"], repr(sorted((k, sorted(v)) for k, v in r["sources"].items())))
        for r in made["inbound_rules"]
    }


ANYWHERE = repr([("addresses", ["0.0.0.0/0", "::/0"])])


def node_port(kube_api: KubeApi, namespace: str, name: str) -> str:
    (port,) = Service(kube_api.get(SERVICES, name, namespace)).ports
    return str(port.node_port)


def test_the_named_firewall_opens_the_services_ports_and_follows_them(
    do: Mapping[str, str], kube_api: KubeApi, namespace: str
) -> None:
    # firewall_controller.go:282-395@v0.1.68 (createReconciledFirewallRequest): NodePort
    # Services' NodePorts unless firewall-managed is false (isManaged, :400-407); for a
    # REGIONAL_NETWORK EXTERNAL load balancer its ports and the health-check port (kube-proxy's
    # 10256, loadbalancers.go:1385-1393); all outbound open (:58-80); the tags of
    # PUBLIC_ACCESS_FIREWALL_TAGS (cloud.go:132-141). Events queue a reconcile (:113-126).
    provider = provider_for(do, PUBLIC_ACCESS_FIREWALL_NAME=FIREWALL,
                            PUBLIC_ACCESS_FIREWALL_TAGS=TAGS)  # fmt: skip
    cloud = DigitalOceanApi(do)

    def node_port_service(spec: dict[str, Any]) -> None:
        spec["spec"]["type"] = "NodePort"

    def unmanaged(spec: dict[str, Any]) -> None:
        spec["spec"]["type"] = "NodePort"
        spec["metadata"]["annotations"][FIREWALL_MANAGED] = "false"

    def on_port(number: int) -> Any:
        def tweak(spec: dict[str, Any]) -> None:
            spec["spec"]["ports"][0]["port"] = number

        return tweak

    def regional(spec: dict[str, Any]) -> None:
        spec["metadata"]["annotations"][ann.TYPE] = "REGIONAL"

    make_service(kube_api, namespace, "np", node_port_service)
    make_service(kube_api, namespace, "np-off", unmanaged)
    make_service(kube_api, namespace, "lb", on_port(18443))
    make_service(kube_api, namespace, "lb-regional", regional, on_port(19443))
    opened, closed = node_port(kube_api, namespace, "np"), node_port(kube_api, namespace, "np-off")

    with firewall_term(kube_api, provider):
        wait_for(lambda: ("tcp", opened, ANYWHERE) in inbound(cloud), what="the NodePort opened")
        made = firewall(cloud)
        assert made is not None
        assert sorted(made["tags"]) == sorted(TAGS.split(","))
        assert {r["protocol"] for r in made["outbound_rules"]} == {"tcp", "udp", "icmp"}
        rules = inbound(cloud)
        assert ("tcp", "18443", ANYWHERE) in rules, rules
        assert ("tcp", "10256", ANYWHERE) in rules, rules
        assert ("tcp", closed, ANYWHERE) not in rules, "firewall-managed: false was opened"
        assert not {r for r in rules if r[1] == "19443"}, "a REGIONAL load balancer's port"

        kube_api.delete(SERVICES, "np", namespace)
        wait_for(lambda: ("tcp", opened, ANYWHERE) not in inbound(cloud),
                 what="the deleted Service's NodePort closed")  # fmt: skip


def test_a_firewall_deleted_by_hand_is_made_again(
    do: Mapping[str, str], kube_api: KubeApi, namespace: str
) -> None:
    # firewall_controller.go:235-265@v0.1.68 (Set): an update answered 404 creates it again.
    provider = provider_for(do, PUBLIC_ACCESS_FIREWALL_NAME=FIREWALL,
                            PUBLIC_ACCESS_FIREWALL_TAGS=TAGS)  # fmt: skip
    cloud = DigitalOceanApi(do)
    make_service(kube_api, namespace, "lb", lambda s: s["spec"]["ports"][0].update(port=18080))

    with firewall_term(kube_api, provider) as controller:
        wait_for(lambda: ("tcp", "18080", ANYWHERE) in inbound(cloud), what="the port opened")
        made = firewall(cloud)
        assert made is not None
        cloud.ok("DELETE", f"/v2/firewalls/{made['id']}")
        make_service(kube_api, namespace, "lb2", lambda s: s["spec"]["ports"][0].update(port=18081))

        wait_for(lambda: ("tcp", "18081", ANYWHERE) in inbound(cloud), what="made again")
        assert ("tcp", "18080", ANYWHERE) in inbound(cloud)
        assert controller.sync() == "unchanged"
