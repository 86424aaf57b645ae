"""The Kubernetes side of a conformance test: one provider term on the real control plane.

Where the contract involves Kubernetes, the kit uses the real thing. :class:`KitCluster` starts
what the manager starts for a leadership term (node and service informers, an event recorder),
waits for the caches to sync and calls ``provider.initialize`` with them, as
``polyccm.app.manager`` does. Nodes are registered through the API as a kubelet registers them
and then initialised with the cloud-node controller's own rules
(:mod:`polyccm.controllers.nodeinfo`: providerID, labels, addresses, taint removed); services
are created as a user creates them. Providers get :class:`~polyccm.objects.Node` and
:class:`~polyccm.objects.Service` views of the objects the API server returned, after the
caches have seen them.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from typing import Any

from polyccm.cloud import CloudProvider, ProviderContext
from polyccm.controllers import nodeinfo
from polyccm.events import EventRecorder
from polyccm.kube.api import NODES, SERVICES, JsonObject, KubeApi
from polyccm.kube.informer import Informer, slim_node
from polyccm.objects import UNINITIALIZED_TAINT, Node, Service

from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.kubeobjects import make_node, make_service, wait_for

SYNC_TIMEOUT = 30.0
"""Seconds to wait for the caches (and for them to see a write)."""


class KitCluster:
    """One leadership term of ``cloud.provider`` against the control plane behind ``api``."""

    def __init__(self, cloud: CloudUnderTest, api: KubeApi, namespace: str) -> None:
        self.cloud = cloud
        self.api = api
        self.namespace = namespace
        self.nodes = Informer(api, NODES, slim=slim_node, name="conformance-nodes")
        self.services = Informer(api, SERVICES, name="conformance-services")
        self.recorder = EventRecorder(api, host="polyccm-conformance")
        self.stop = threading.Event()
        self._registered: dict[str, Node] = {}

    @property
    def provider(self) -> CloudProvider:
        return self.cloud.provider

    def start(self) -> None:
        """Start the caches and the recorder; once synced, give the provider its term."""
        self.recorder.start()
        self.nodes.start()
        self.services.start()
        for informer in (self.nodes, self.services):
            if not informer.wait_for_sync(SYNC_TIMEOUT):
                raise RuntimeError(f"the {informer.name} cache did not sync")
        self.provider.initialize(
            ProviderContext(
                api=self.api,
                nodes=self.nodes,
                services=self.services,
                recorder=self.recorder,
                stop=self.stop,
            )
        )

    def close(self) -> None:
        """End the term: tell the provider, stop the caches and the recorder."""
        self.stop.set()
        self.nodes.stop()
        self.services.stop()
        self.recorder.stop()

    # -- nodes ----------------------------------------------------------------------------

    def add_node(self, hint: str, *, pod_cidr: str | None = None, initialise: bool = True) -> Node:
        """Create an instance in the cloud, register its Node as the kubelet does (tainted
        uninitialised, Ready, no providerID) and, unless ``initialise`` is false, initialise
        it as the cloud-node controller would. Returns the node as the cache holds it."""
        name = self.cloud.create_instance(f"{hint}-{secrets.token_hex(3)}")
        created = make_node(self.api, name, pod_cidrs=(pod_cidr,) if pod_cidr else ())
        registered = self._cached(name, created)
        self._registered[name] = registered
        return self.initialise(registered) if initialise else registered

    def add_named_node(self, name: str, provider_id: str) -> Node:
        """Register a Node whose kubelet was given ``provider_id`` but another name than the
        cloud's (``--hostname-override``): only the providerID leads to its instance."""
        created = make_node(self.api, name, tainted=False, provider_id=provider_id)
        return self._cached(name, created)

    def before_initialisation(self, node: Node) -> Node:
        """``node`` as its kubelet registered it: no providerID yet, found by name only."""
        return self._registered[node.name]

    def initialise(self, node: Node) -> Node:
        """What the cloud-node controller does to a new node, with its own rules: providerID,
        instance-type/zone/region labels, cloud addresses, and the taint removed."""
        instances = self.provider.instances_v2()
        if instances is None:
            return node  # nothing to initialise from; the kubelet's node is all there is
        metadata = instances.instance_metadata(node)
        spec: dict[str, Any] = {"taints": nodeinfo.without_taint(node.taints, UNINITIALIZED_TAINT)}
        if not node.provider_id and metadata.provider_id:
            spec["providerID"] = metadata.provider_id
        self.api.patch(
            NODES,
            node.name,
            {"metadata": {"labels": nodeinfo.labels_for(metadata, node.labels)}, "spec": spec},
        )
        addresses = nodeinfo.node_addresses(node, metadata.node_addresses)
        patched = self.api.patch(
            NODES,
            node.name,
            {"status": {"addresses": nodeinfo.addresses_to_api(addresses)}},
            subresource="status",
        )
        return self._cached(node.name, patched)

    def node(self, name: str) -> Node:
        """The cached node ``name``."""
        raw = self.nodes.get(name)
        if raw is None:
            raise KeyError(f"node {name} is not in the cache")
        return Node(raw)

    # -- services -------------------------------------------------------------------------

    def add_service(self, name: str, *, annotations: Mapping[str, str] | None = None) -> Service:
        """A ``type: LoadBalancer`` service on port 80 as a user creates it (the API server
        gives it a UID and a node port), once the cache has seen it."""

        def annotate(body: dict[str, Any]) -> None:
            body["metadata"]["annotations"].update(annotations or {})

        created = make_service(self.api, self.namespace, name, annotate)
        return Service(self._cached_raw(self.services, f"{self.namespace}/{name}", created))

    # -- waiting for the caches ----------------------------------------------------------

    def _cached(self, name: str, written: JsonObject) -> Node:
        return Node(self._cached_raw(self.nodes, name, written))

    @staticmethod
    def _cached_raw(informer: Informer, key: str, written: JsonObject) -> JsonObject:
        """The cached object once it is at least as new as ``written``."""
        # resourceVersions are opaque to clients in general, but this control plane is a
        # plain etcd, whose revisions grow as integers: newer-or-equal is what we wait for.
        version = int(written["metadata"]["resourceVersion"])

        def seen() -> JsonObject | None:
            cached = informer.get(key)
            if cached is not None and int(cached["metadata"]["resourceVersion"]) >= version:
                return cached
            return None

        found: JsonObject = wait_for(seen, SYNC_TIMEOUT, f"the cache to see {key}")
        return found
