"""Load balancers on the emulator: the id annotation keeps a renamed load balancer the same one
(DO #224), a ``new`` one is asked about again after 1 s, then less often up to every 15 s, with
one listing for all those waiting, one is deleted by its annotated id, disowned ones are left
alone, invalid services cost no cloud call, and the annotations reach DigitalOcean. The type as
upstream's CCM decides it since v0.1.61: a new load balancer is REGIONAL_NETWORK (to the
service ports) unless ``DEFAULT_LB_TYPE=REGIONAL``; one that exists keeps its type, written back
as the ``type`` annotation; and ``polyccm plan``'s planner adopts what the current upstream
release and an older one made, reading only, and warns as ensure would (of the default type for
a load balancer to make, of its own type for one that exists)."""

from __future__ import annotations

import json
import time
import tracemalloc
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from polyccm import cloudcalls
from polyccm.cloud import default_load_balancer_name
from polyccm.errors import InvalidServiceSpec, RetryAfter
from polyccm.objects import Node, Service
from polyccm.ops.contract import ADOPT, CREATE
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean.load_balancer import DigitalOceanLoadBalancer, DroppedDroplets
from polyccm_digitalocean_emulator.testing import (
    DigitalOceanApi,
    control,
    provider_for,
    upstream_load_balancer,
)


def service(annotations: Mapping[str, str] | None = None, *, uid: str = "") -> Service:
    return Service({
        "metadata": {"name": "web", "namespace": "default", "uid": uid or str(uuid.uuid4()),
                     "annotations": dict(annotations or {})},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}]},
    })  # fmt: skip


def with_annotations(svc: Service, extra: Mapping[str, str]) -> Service:
    raw: dict[str, Any] = {**svc.raw, "metadata": {**svc.raw["metadata"]}}
    raw["metadata"]["annotations"] = {**svc.annotations, **extra}
    return Service(raw)


def node(droplet_id: int, name: str, *addresses: tuple[str, str]) -> Node:
    """A Node of droplet ``droplet_id`` with ``(type, address)`` addresses."""
    listed = [{"type": kind, "address": address} for kind, address in addresses]
    return Node({"metadata": {"name": name},
                 "spec": {"providerID": f"digitalocean://{droplet_id}"},
                 "status": {"addresses": listed}})  # fmt: skip


def nodes(api: DigitalOceanApi, count: int = 1) -> list[Node]:
    """Initialised Nodes (each with a public IPv4, as the node controller writes it)."""
    return [
        node(d["id"], d["name"], ("ExternalIP", f"203.0.113.{index + 1}"))
        for index, d in enumerate(api.create_droplets(count))
    ]


def balancers(api: DigitalOceanApi) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.ok("GET", "/v2/load_balancers")["load_balancers"]
    return found


def test_a_renamed_load_balancer_stays_the_same_one(do: Mapping[str, str]) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api)
    first = service({ann.NAME: "first"})
    status = provider_for(do).load_balancer().ensure_load_balancer("k", first, backends)
    lb_id = status.service_annotations[ann.LOAD_BALANCER_ID]

    # The controller writes the id; later a user renames the LB, and a new leader takes over.
    renamed = with_annotations(first, {ann.LOAD_BALANCER_ID: lb_id, ann.NAME: "second"})
    again = provider_for(do).load_balancer().ensure_load_balancer("k", renamed, backends)

    # Its id and its type, as upstream writes them.
    assert again.service_annotations == {ann.LOAD_BALANCER_ID: lb_id,
                                         ann.TYPE: "REGIONAL_NETWORK"}  # fmt: skip
    assert [(b["id"], b["name"]) for b in balancers(api)] == [(lb_id, "second")]


def test_a_new_load_balancer_is_asked_about_again_sooner_then_later_up_to_every_15_seconds(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    now = [1000.0]
    balancer = DigitalOceanLoadBalancer(provider_for(do).api, region="nyc3", clock=lambda: now[0])
    svc = service()
    control(do).configure(lb_active_delay=60.0)
    delays = []
    try:
        for waited in (0.0, 0.5, 4.0, 100.0):
            now[0] = 1000.0 + waited
            with pytest.raises(RetryAfter) as raised:
                balancer.ensure_load_balancer("k", svc, nodes(api) if not delays else [])
            delays.append(raised.value.delay)
    finally:
        control(do).configure(lb_active_delay=0.0)

    assert delays == [1.0, 1.0, 4.0, 15.0]
    assert len(balancers(api)) == 1, "a retry made a second load balancer"


def test_load_balancers_still_new_are_read_and_deleted_by_their_id(
    do: Mapping[str, str],
) -> None:
    """As upstream: never a listing of every load balancer (25 MB with 500 of 5,000 droplets)
    while one is ``new``."""
    api = DigitalOceanApi(do)
    backends = nodes(api)
    balancer = provider_for(do).load_balancer()
    services = [service() for _ in range(3)]
    control(do).configure(lb_active_delay=60.0)
    try:
        for svc in services:
            with pytest.raises(RetryAfter):
                balancer.ensure_load_balancer("k", svc, backends)
        control(do).reset_calls()
        for svc in services:
            with pytest.raises(RetryAfter):
                balancer.ensure_load_balancer("k", svc, backends)
        assert control(do).calls() == {"loadBalancers_get": 3}
    finally:
        control(do).configure(lb_active_delay=0.0)
    ids = {b["name"]: b["id"] for b in balancers(api)}
    annotated = [with_annotations(svc, {ann.LOAD_BALANCER_ID: ids[default_load_balancer_name(svc)]})
                 for svc in services]  # fmt: skip

    control(do).reset_calls()
    for svc in annotated:
        balancer.ensure_load_balancer_deleted("k", svc)

    assert control(do).calls() == {"loadBalancers_delete": 3}
    assert balancers(api) == []


def test_a_burst_of_new_services_shares_one_listing_and_sees_its_own_creates_and_deletes(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api)
    now = [1000.0]
    balancer = DigitalOceanLoadBalancer(provider_for(do).api, region="nyc3", clock=lambda: now[0])
    burst = [service() for _ in range(3)]
    control(do).reset_calls()
    for svc in burst:
        balancer.ensure_load_balancer("k", svc, backends)
    assert control(do).calls()["loadBalancers_list"] == 1, "one listing for the burst"
    assert len(balancers(api)) == 3

    # Deleted by name (no id annotated): the kept listing no longer shows it.
    balancer.ensure_load_balancer_deleted("k", burst[0])
    assert balancer.get_load_balancer("k", burst[0]) is None
    assert len(balancers(api)) == 2

    # Later than the listing's age, a new service lists afresh.
    now[0] += 6.0
    control(do).reset_calls()
    balancer.ensure_load_balancer("k", service(), backends)
    assert control(do).calls()["loadBalancers_list"] == 1
    assert len(balancers(api)) == 3


class ReadCounted(list[Node]):
    """A node list that counts how often it is read through."""

    reads = 0

    def __iter__(self) -> Iterator[Node]:
        self.reads += 1
        return super().__iter__()


def test_a_burst_of_services_given_one_node_list_reads_the_nodes_once(
    do: Mapping[str, str],
) -> None:
    """The service controller hands every ensure and update of a burst the same node list (one
    per node cache version): its nodes are sorted into backends once, not once per Service (at
    a thousand nodes that sorting was most of a sync's time), and each load balancer still
    gets all of them; a list of other nodes is read afresh."""
    api = DigitalOceanApi(do)
    given = ReadCounted(nodes(api, 3))
    balancer = provider_for(do).load_balancer()
    burst = [service() for _ in range(3)]

    for svc in burst:
        balancer.ensure_load_balancer("k", svc, given)
    svc = with_annotations(burst[0], {ann.LOAD_BALANCER_ID: balancers(api)[0]["id"]})
    balancer.update_load_balancer("k", svc, given)

    assert given.reads == 1
    assert [sorted(b["droplet_ids"]) for b in balancers(api)] == [sorted(droplet_ids(given))] * 3
    joined = ReadCounted([*given, *nodes(api)])
    balancer.update_load_balancer("k", svc, joined)
    assert joined.reads == 1
    held = {b["id"]: sorted(b["droplet_ids"]) for b in balancers(api)}
    assert held[svc.annotations[ann.LOAD_BALANCER_ID]] == sorted(droplet_ids(joined))


def test_a_destroyed_droplet_whose_node_is_still_listed_keeps_no_new_node_out(
    do: Mapping[str, str],
) -> None:
    """DigitalOcean takes a destroyed droplet out of its load balancers, and refuses (422) a
    request naming it; its node stays listed until the node lifecycle controller deletes it,
    and the nodes that replace it are added meanwhile."""
    api = DigitalOceanApi(do)
    old = nodes(api, 3)
    svc = service()
    balancer = provider_for(do).load_balancer()
    svc = with_annotations(svc, balancer.ensure_load_balancer("k", svc, old).service_annotations)
    api.delete_droplet(droplet_ids(old)[0])
    new = nodes(api, 2)
    control(do).reset_calls()

    balancer.update_load_balancer("k", svc, old + new)
    balancer.update_load_balancer("k", svc, old + new)  # nothing more to add

    assert control(do).calls() == {"loadBalancers_get": 2, "loadBalancers_add_droplets": 1}
    ((_, held),) = [(b["id"], b["droplet_ids"]) for b in balancers(api)]
    assert sorted(held) == sorted(droplet_ids(old[1:] + new))
    balancer.update_load_balancer("k", svc, old[1:] + new[:1])  # this process's removal
    balancer.update_load_balancer("k", svc, old[1:] + new)  # is no drop: added back
    ((_, held),) = [(b["id"], b["droplet_ids"]) for b in balancers(api)]
    assert sorted(held) == sorted(droplet_ids(old[1:] + new))


def test_load_balancers_holding_the_same_droplets_are_remembered_in_one_set() -> None:
    """What each load balancer held is kept once per distinct set, however the updates of a
    node change interleave: 100 load balancers of 2,000 droplets, read and grown in turn, hold
    a few MB, not one 2,000-id set each (500 of 5,000 grew polyccm by 140 MiB)."""
    dropped = DroppedDroplets(time.monotonic)
    listed = json.dumps(list(range(463_000_001, 463_002_001)))
    tracemalloc.start()
    try:
        for step in range(3):
            for lb in range(100):
                held = json.loads(listed) + list(range(463_100_000, 463_100_000 + 100 * step))
                dropped.seen({"id": str(lb), "droplet_ids": held})
                dropped.changed(str(lb), added=range(463_100_000, 463_100_000 + 100 * (step + 1)))
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 5 * 2**20, f"{kept / 2**20:.0f} MiB"


def test_a_disowned_load_balancer_is_neither_changed_nor_deleted(do: Mapping[str, str]) -> None:
    api = DigitalOceanApi(do)
    provider = provider_for(do)
    backends = nodes(api, 2)
    svc = service()
    provider.load_balancer().ensure_load_balancer("k", svc, backends)
    before = balancers(api)
    disowned = with_annotations(svc, {ann.DISOWN: "true", ann.PROXY_PROTOCOL: "true"})

    provider.load_balancer().ensure_load_balancer("k", disowned, backends[:1])
    provider.load_balancer().update_load_balancer("k", disowned, backends[:1])
    provider.load_balancer().ensure_load_balancer_deleted("k", disowned)

    assert balancers(api) == before


def test_an_invalid_service_costs_no_cloud_call(do: Mapping[str, str]) -> None:
    provider = provider_for(do)
    control(do).reset_calls()

    with pytest.raises(InvalidServiceSpec, match=ann.TLS_PORTS):
        provider.load_balancer().ensure_load_balancer(
            "k", service({ann.TYPE: "REGIONAL", ann.TLS_PORTS: "80"}), []
        )

    assert dict(control(do).calls()) == {}


def test_annotations_reach_digitalocean_and_changes_update_in_place(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    provider = provider_for(do)
    certificate = api.ok("POST", "/v2/certificates", {
        "name": "web", "type": "custom", "private_key": "k", "leaf_certificate": "c",
    })["certificate"]  # fmt: skip
    svc = service({ann.TYPE: "REGIONAL", ann.TLS_PORTS: "80", ann.CERTIFICATE_NAME: "web",
                   ann.STICKY_TYPE: "cookies", ann.STICKY_COOKIE_NAME: "s",
                   ann.STICKY_COOKIE_TTL: "60", ann.SIZE_UNIT: "2",
                   ann.ALLOW_RULES: "cidr:10.0.0.0/8", ann.HC_PATH: "/x"})  # fmt: skip

    status = provider.load_balancer().ensure_load_balancer("k", svc, nodes(api))
    (made,) = balancers(api)
    changed = with_annotations(svc, {ann.PROXY_PROTOCOL: "true"})
    provider.load_balancer().ensure_load_balancer("k", changed, [])
    (updated,) = balancers(api)

    assert made["forwarding_rules"][0]["certificate_id"] == certificate["id"]
    assert made["forwarding_rules"][0]["entry_protocol"] == "https"
    assert made["sticky_sessions"]["cookie_name"] == "s" and made["size_unit"] == 2
    assert made["firewall"]["allow"] == ["cidr:10.0.0.0/8"]
    assert made["health_check"]["port"] == 10256
    assert any(ann.HC_PATH in warning for warning in status.warnings)
    assert updated["id"] == made["id"] and updated["enable_proxy_protocol"] is True


def test_source_ranges_are_the_firewalls_allow_list_as_upstream_writes_it(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api)
    svc = service()
    svc.raw["spec"]["loadBalancerSourceRanges"] = ["10.0.0.0/8", "2001:db8::/32"]
    droplets = droplet_ids(backends)
    upstream_load_balancer(
        api, default_load_balancer_name(svc), droplets, {80: 30080},
        firewall={"allow": ["cidr:2001:db8::/32", "cidr:10.0.0.0/8"], "deny": []},
    )  # fmt: skip
    balancer = provider_for(do).load_balancer()
    control(do).reset_calls()

    balancer.ensure_load_balancer("k", svc, backends)

    assert set(control(do).calls()) <= {"loadBalancers_get", "loadBalancers_list"}
    svc.raw["spec"]["loadBalancerSourceRanges"] = ["192.0.2.0/24"]
    balancer.ensure_load_balancer("k", svc, backends)
    (updated,) = balancers(api)
    assert updated["firewall"] == {"allow": ["cidr:192.0.2.0/24"], "deny": []}


# -- the type, as upstream's CCM decides it since v0.1.61 ------------------------------------


def droplet_ids(backends: list[Node]) -> list[int]:
    return [int(n.provider_id.rsplit("/", 1)[1]) for n in backends]


def writes(do: Mapping[str, str]) -> dict[str, int]:
    return {op: n for op, n in control(do).calls().items() if not op.endswith(("_get", "_list"))}


def rules(balancer: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    return [(r["entry_protocol"], r["entry_port"], r["target_port"])
            for r in balancer["forwarding_rules"]]  # fmt: skip


def test_a_new_load_balancer_is_regional_network_unless_default_lb_type_says_regional(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api, 2)

    network = provider_for(do).load_balancer().ensure_load_balancer("k", service(), backends)
    regional = (
        provider_for(do, DEFAULT_LB_TYPE="REGIONAL")
        .load_balancer()
        .ensure_load_balancer("k", service(), backends)
    )

    made = {b["id"]: b for b in api.ok("GET", "/v2/load_balancers")["load_balancers"]}
    first, second = (made[s.service_annotations[ann.LOAD_BALANCER_ID]] for s in (network, regional))
    assert (first["type"], rules(first)) == ("REGIONAL_NETWORK", [("tcp", 80, 80)])
    assert (second["type"], rules(second)) == ("REGIONAL", [("tcp", 80, 30080)])
    assert network.service_annotations[ann.TYPE] == "REGIONAL_NETWORK"
    assert regional.service_annotations[ann.TYPE] == "REGIONAL"


def test_a_load_balancer_keeps_its_type_whatever_the_default(do: Mapping[str, str]) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api, 2)
    droplets = droplet_ids(backends)
    # Made by upstream before v0.1.61 (REGIONAL, to the node ports, no type annotation).
    older = service()
    upstream_load_balancer(api, default_load_balancer_name(older), droplets, {80: 30080})
    control(do).reset_calls()

    status = provider_for(do).load_balancer().ensure_load_balancer("k", older, backends)

    assert writes(do) == {}
    assert status.service_annotations[ann.TYPE] == "REGIONAL"
    # The annotation asks for another type: the load balancer cannot change; a warning says so.
    asked = with_annotations(older, {ann.TYPE: "REGIONAL_NETWORK"})
    again = provider_for(do).load_balancer().ensure_load_balancer("k", asked, backends)
    assert writes(do) == {}
    assert again.service_annotations[ann.TYPE] == "REGIONAL"
    (warning,) = again.warnings
    assert ann.TYPE in warning and "cannot change" in warning


def test_what_current_and_older_upstream_made_plans_as_adopt_reading_only(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api, 2)
    droplets = droplet_ids(backends)
    # The current release: REGIONAL_NETWORK to the service port, the type annotation written
    # back (and the id); an NLB found by name; a REGIONAL one of an older release.
    current = service()
    made = upstream_load_balancer(api, default_load_balancer_name(current), droplets, {80: 80},
                                  type="REGIONAL_NETWORK")  # fmt: skip
    current = with_annotations(current, {ann.LOAD_BALANCER_ID: made["id"],
                                         ann.TYPE: "REGIONAL_NETWORK"})  # fmt: skip
    by_name, older = service(), service()
    upstream_load_balancer(api, default_load_balancer_name(by_name), droplets, {80: 80},
                           type="REGIONAL_NETWORK")  # fmt: skip
    upstream_load_balancer(api, default_load_balancer_name(older), droplets, {80: 30080})
    provider = provider_for(do)
    control(do).reset_calls()

    with cloudcalls.reads_only(provider.read_only_call):
        plans = [provider.load_balancer_planner().plan_load_balancer("k", s, backends)
                 for s in (current, by_name, older)]  # fmt: skip

    assert [(p.action, p.differences, p.problems) for p in plans] == [(ADOPT, (), ())] * 3
    assert writes(do) == {}


def test_plan_warnings_are_those_of_the_configured_default_type_and_of_an_existing_type(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    backends = nodes(api)
    provider = provider_for(do, DEFAULT_LB_TYPE="REGIONAL")
    # REGIONAL reads the protocol annotation; a REGIONAL_NETWORK load balancer ignores it.
    fresh, waiting, network = (service({ann.PROTOCOL: "http"}) for _ in range(3))
    ignored = f"annotation {ann.PROTOCOL} is ignored"

    with cloudcalls.reads_only(provider.read_only_call):
        create = provider.load_balancer_planner().plan_load_balancer("k", fresh, backends)

    assert (create.action, create.problems) == (CREATE, ())
    assert create.differences[0].detail.startswith("create REGIONAL EXTERNAL")
    control(do).configure(lb_active_delay=600.0)  # made now, they stay new
    try:
        with pytest.raises(RetryAfter):
            provider.load_balancer().ensure_load_balancer("k", waiting, backends)
        upstream_load_balancer(api, default_load_balancer_name(network), droplet_ids(backends),
                               {80: 80}, type="REGIONAL_NETWORK")  # fmt: skip
        control(do).reset_calls()
        with cloudcalls.reads_only(provider.read_only_call):
            plans = [provider.load_balancer_planner().plan_load_balancer("k", s, backends)
                     for s in (waiting, network)]  # fmt: skip
    finally:
        control(do).configure(lb_active_delay=0.0)

    assert writes(do) == {}
    messages = [[p.message for p in plan.problems] for plan in plans]
    assert [plan.action for plan in plans] == [ADOPT, ADOPT]
    assert [len(m) for m in messages] == [1, 2], messages
    assert all("is not yet active" in m[-1] for m in messages)
    assert messages[1][0].startswith(ignored)


# -- issue 29: as upstream v0.1.68 ----------------------------------------------------------


def test_a_disowned_service_is_neither_read_nor_checked_nor_sent(do: Mapping[str, str]) -> None:
    # EnsureLoadBalancer, UpdateLoadBalancer and EnsureLoadBalancerDeleted each start with
    # getDisownLB and return (loadbalancers.go:205-213, 379-387, 407-415@v0.1.68): no
    # load balancer needed, no other annotation read, no call, the status as it is.
    provider = provider_for(do)
    svc = service({ann.DISOWN: "true", ann.TYPE: "GLOBAL", ann.PROTOCOL: "ftp"})
    svc.raw["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
    control(do).reset_calls()

    status = provider.load_balancer().ensure_load_balancer("k", svc, [])
    provider.load_balancer().update_load_balancer("k", svc, [])
    provider.load_balancer().ensure_load_balancer_deleted("k", svc)
    with cloudcalls.reads_only(provider.read_only_call):
        plan = provider.load_balancer_planner().plan_load_balancer("k", svc, [])

    assert [i.ip for i in status.ingress] == ["192.0.2.10"]
    assert (plan.action, plan.problems) == (ADOPT, ())
    assert dict(control(do).calls()) == {}


def test_regional_network_external_backends_are_the_nodes_with_a_public_ipv4(
    do: Mapping[str, str],
) -> None:
    # filterAndClassifyNodes and classifyNode (loadbalancers.go:581-676@v0.1.68): an
    # IPv6-only node is never an EXTERNAL backend; a private-only one (an InternalIP) only of a
    # REGIONAL load balancer; a REGIONAL_NETWORK one is DUALSTACK only when every backend is
    # (getNetworkStack 1779-1793).
    api = DigitalOceanApi(do)
    public, v6, private = api.create_droplets(3)
    backends = [
        node(public["id"], "public", ("ExternalIP", "203.0.113.1")),
        node(v6["id"], "v6", ("ExternalIP", "2001:db8::1")),
        node(private["id"], "private", ("InternalIP", "10.0.0.3")),
    ]
    dual = [node(public["id"], "public", ("ExternalIP", "203.0.113.1"),
                 ("ExternalIP", "2001:db8::2"))]  # fmt: skip
    balancer = provider_for(do).load_balancer()

    network = balancer.ensure_load_balancer("k", service(), backends)
    regional = balancer.ensure_load_balancer("k", service({ann.TYPE: "REGIONAL"}), backends)
    stacked = balancer.ensure_load_balancer("k", service(), dual)

    made = {b["id"]: b for b in balancers(api)}
    got = [made[s.service_annotations[ann.LOAD_BALANCER_ID]] for s in (network, regional, stacked)]
    assert [sorted(b["droplet_ids"]) for b in got] == [
        [public["id"]],
        sorted([public["id"], private["id"]]),
        [public["id"]],
    ]
    assert [b["network_stack"] for b in got] == ["IPV4", "DUALSTACK", "DUALSTACK"]
    with pytest.raises(InvalidServiceSpec, match="public"):
        balancer.ensure_load_balancer("k", service(), backends[2:])


def test_an_annotated_id_digitalocean_no_longer_has_gets_a_new_load_balancer(
    do: Mapping[str, str],
) -> None:
    # retrieveLoadBalancer looks up an annotated id only (loadbalancers.go:452-458), a 404 is
    # errLBNotFound (473-483) and EnsureLoadBalancer creates (233-243@v0.1.68).
    api = DigitalOceanApi(do)
    backends = nodes(api)
    svc = service()
    named = upstream_load_balancer(api, default_load_balancer_name(svc), droplet_ids(backends),
                                   {80: 80}, type="REGIONAL_NETWORK")  # fmt: skip
    gone = with_annotations(svc, {ann.LOAD_BALANCER_ID: "0ff1ce00-0000-4000-8000-000000000000"})

    status = provider_for(do).load_balancer().ensure_load_balancer("k", gone, backends)

    assert status.service_annotations[ann.LOAD_BALANCER_ID] != named["id"]
    assert len(balancers(api)) == 2


def test_a_renewed_lets_encrypt_certificate_is_followed_and_the_annotation_rewritten(
    do: Mapping[str, str],
) -> None:
    # recordUpdatedLetsEncryptCert (loadbalancers.go:299-337@v0.1.68): DigitalOcean renewed the
    # certificate (a new id, the same name) on the load balancer; the id annotation follows
    # it and the old id is never sent back.
    api = DigitalOceanApi(do)
    backends = nodes(api)
    old, new = (api.ok("POST", "/v2/certificates", {
        "name": "shop", "type": "lets_encrypt", "dns_names": ["shop.example.com"],
    })["certificate"] for _ in range(2))  # fmt: skip
    svc = service({ann.TYPE: "REGIONAL", ann.CERTIFICATE_ID: old["id"]})
    svc.raw["spec"]["ports"] = [{"name": "https", "protocol": "TCP", "port": 443,
                                 "nodePort": 30443}]  # fmt: skip
    made = upstream_load_balancer(
        api, default_load_balancer_name(svc), droplet_ids(backends), {}, network_stack="DUALSTACK",
        forwarding_rules=[{"entry_protocol": "https", "entry_port": 443, "target_protocol": "http",
                           "target_port": 30443, "certificate_id": new["id"]}],
    )  # fmt: skip
    svc = with_annotations(svc, {ann.LOAD_BALANCER_ID: made["id"]})
    control(do).reset_calls()

    status = provider_for(do).load_balancer().ensure_load_balancer("k", svc, backends)

    assert writes(do) == {}
    assert status.service_annotations[ann.CERTIFICATE_ID] == new["id"]
    assert [r["certificate_id"] for r in balancers(api)[0]["forwarding_rules"]] == [new["id"]]


def test_a_renewed_lets_encrypt_certificate_is_followed_for_a_certificate_name_too(
    do: Mapping[str, str],
) -> None:
    # updateLoadBalancer (loadbalancers.go:348-357@v0.1.68) gives recordUpdatedLetsEncryptCert
    # (299-337) the id findCertificateID (1547-1566) finds by name: a renewed Let's Encrypt
    # certificate of the same name on the load balancer is kept; the old one, still listed
    # first under that name, is never sent back.
    api = DigitalOceanApi(do)
    backends = nodes(api)
    old, new = (api.ok("POST", "/v2/certificates", {
        "name": "shop", "type": "lets_encrypt", "dns_names": ["shop.example.com"],
    })["certificate"] for _ in range(2))  # fmt: skip
    listed = api.ok("GET", "/v2/certificates?name=shop")["certificates"]
    assert [c["id"] for c in listed] == [old["id"], new["id"]]  # the old one first
    svc = service({ann.TYPE: "REGIONAL", ann.CERTIFICATE_NAME: "shop"})
    svc.raw["spec"]["ports"] = [{"name": "https", "protocol": "TCP", "port": 443,
                                 "nodePort": 30443}]  # fmt: skip
    made = upstream_load_balancer(
        api, default_load_balancer_name(svc), droplet_ids(backends), {}, network_stack="DUALSTACK",
        forwarding_rules=[{"entry_protocol": "https", "entry_port": 443, "target_protocol": "http",
                           "target_port": 30443, "certificate_id": new["id"]}],
    )  # fmt: skip
    svc = with_annotations(svc, {ann.LOAD_BALANCER_ID: made["id"]})
    control(do).reset_calls()

    status = provider_for(do).load_balancer().ensure_load_balancer("k", svc, backends)

    assert writes(do) == {}
    assert [r["certificate_id"] for r in balancers(api)[0]["forwarding_rules"]] == [new["id"]]
    # The id annotation is written for a name too (updateServiceAnnotation, 334), and the
    # Service then carries both: the id wins (findCertificateID, 1548-1551), nothing refused.
    assert status.service_annotations[ann.CERTIFICATE_ID] == new["id"]
    both = with_annotations(svc, status.service_annotations)
    provider_for(do).load_balancer().ensure_load_balancer("k", both, backends)
    assert writes(do) == {}


def test_with_both_certificate_annotations_the_id_wins_as_upstream(
    do: Mapping[str, str],
) -> None:
    # findCertificateID (loadbalancers.go:1547-1551@v0.1.68) returns the certificate-id
    # annotation when set and only else looks the certificate-name up: both together are no
    # conflict, the name is not read.
    api = DigitalOceanApi(do)
    named, chosen = (api.ok("POST", "/v2/certificates", {
        "name": name, "type": "custom", "private_key": "k", "leaf_certificate": "c",
    })["certificate"] for name in ("named", "chosen"))  # fmt: skip
    svc = service({ann.TYPE: "REGIONAL", ann.CERTIFICATE_ID: chosen["id"],
                   ann.CERTIFICATE_NAME: "named"})  # fmt: skip
    svc.raw["spec"]["ports"] = [{"name": "https", "protocol": "TCP", "port": 443,
                                 "nodePort": 30443}]  # fmt: skip

    status = provider_for(do).load_balancer().ensure_load_balancer("k", svc, nodes(api))

    (made,) = balancers(api)
    assert [(r["entry_protocol"], r["certificate_id"]) for r in made["forwarding_rules"]] == [
        ("https", chosen["id"])
    ]
    assert not status.warnings and named["id"] != chosen["id"]


def test_an_upstream_dualstack_regional_load_balancer_is_adopted_without_a_write(
    do: Mapping[str, str],
) -> None:
    # Upstream makes REGIONAL DUALSTACK by default since v0.1.63 (getNetworkStack,
    # loadbalancers.go:1797-1800@v0.1.68); the stack it has is kept, never PUT back to IPV4.
    api = DigitalOceanApi(do)
    backends = nodes(api)
    svc = service({ann.TYPE: "REGIONAL"})
    upstream_load_balancer(api, default_load_balancer_name(svc), droplet_ids(backends),
                           {80: 30080}, network_stack="DUALSTACK")  # fmt: skip
    control(do).reset_calls()

    provider_for(do).load_balancer().ensure_load_balancer("k", svc, backends)

    assert writes(do) == {}
    assert balancers(api)[0]["network_stack"] == "DUALSTACK"


def test_an_existing_regional_load_balancer_keeps_its_private_only_backends(
    do: Mapping[str, str],
) -> None:
    # allowsPrivateOnlyBackends (loadbalancers.go:581-584@v0.1.68) is read for the type the
    # load balancer has: a REGIONAL one made before the REGIONAL_NETWORK default keeps nodes
    # with only an InternalIP.
    api = DigitalOceanApi(do)
    (droplet,) = api.create_droplets(1)
    private = [node(droplet["id"], "private", ("InternalIP", "10.0.0.3"))]
    svc = service()
    upstream_load_balancer(api, default_load_balancer_name(svc), [droplet["id"]], {80: 30080})
    control(do).reset_calls()

    provider_for(do).load_balancer().ensure_load_balancer("k", svc, private)

    assert writes(do) == {}


def test_a_node_without_a_provider_id_is_found_by_its_droplets_name(
    do: Mapping[str, str],
) -> None:
    # nodesToDropletIDs (loadbalancers.go:723-782@v0.1.68): a node with no providerID is the
    # droplet of its name, from a listing of the droplets.
    api = DigitalOceanApi(do)
    (droplet,) = api.create_droplets(1, prefix="named")
    bare = Node({"metadata": {"name": droplet["name"]}, "spec": {},
                 "status": {"addresses": [{"type": "ExternalIP",
                                           "address": "203.0.113.9"}]}})  # fmt: skip

    status = provider_for(do).load_balancer().ensure_load_balancer("k", service(), [bare])

    (made,) = balancers(api)
    assert made["id"] == status.service_annotations[ann.LOAD_BALANCER_ID]
    assert made["droplet_ids"] == [droplet["id"]]


def test_a_new_load_balancer_is_made_with_the_cluster_tag(do: Mapping[str, str]) -> None:
    # buildLoadBalancerRequest (loadbalancers.go:985-989@v0.1.68) puts buildK8sTag(clusterID)
    # (loadbalancers.go:98-100) in the create request's tags: the load balancer is this
    # cluster's from its first moment, not only once the tags syncer has passed.
    api = DigitalOceanApi(do)
    backends = nodes(api)
    cluster_id = "c0ffee00-0000-4000-8000-000000000002"
    control(do).reset_calls()

    status = (
        provider_for(do, DO_CLUSTER_ID=cluster_id)
        .load_balancer()
        .ensure_load_balancer("k", service(), backends)
    )

    lb_id = status.service_annotations[ann.LOAD_BALANCER_ID]
    made = api.ok("GET", f"/v2/load_balancers/{lb_id}")["load_balancer"]
    assert made["tags"] == [f"k8s:{cluster_id}"]
    assert writes(do) == {"loadBalancers_create": 1}  # no tag call after it


def test_an_update_sends_the_cluster_tag_as_upstreams_does(do: Mapping[str, str]) -> None:
    # updateLoadBalancer PUTs the request of buildLoadBalancerRequest (loadbalancers.go:359-366
    # @v0.1.68), which carries buildK8sTag(clusterID) in its tags (985-989) for an update as for
    # a create. DigitalOcean keeps a load balancer's tags on a PUT (set at creation, godo
    # load_balancers.go:53), so tags alone are no reason for a PUT.
    api = DigitalOceanApi(do)
    backends = nodes(api)
    cluster_id = "c0ffee00-0000-4000-8000-000000000003"
    provider = provider_for(do, DO_CLUSTER_ID=cluster_id)
    svc = service()
    status = provider.load_balancer().ensure_load_balancer("k", svc, backends)
    svc = with_annotations(svc, status.service_annotations)
    sent: list[tuple[str, Any]] = []
    call = provider.api.call

    def spy(operation: str, **params: Any) -> Any:
        sent.append((operation, params.get("body")))
        return call(operation, **params)

    provider.api.call = spy
    provider.load_balancer().ensure_load_balancer("k", svc, backends)
    assert [op for op, _ in sent if op == "load_balancers.update"] == [], "a PUT for nothing"
    changed = with_annotations(svc, {ann.PROXY_PROTOCOL: "true"})
    provider.load_balancer().ensure_load_balancer("k", changed, backends)

    (put,) = [body for op, body in sent if op == "load_balancers.update"]
    assert put["tags"] == [f"k8s:{cluster_id}"]
    assert balancers(api)[0]["tags"] == [f"k8s:{cluster_id}"]
