"""moto made fast enough for 5,000 nodes: patches applied when the emulator starts, each
answering exactly as moto does (the tests compare them with moto's own code).

Beside those of :mod:`.moto_requests` (receiving), :mod:`.moto_rendering` (answering) and
:mod:`.moto_lookups` (filters): instances and images found by id in a dict, long query lists
parsed by binary search, a resource's tags read by its id, and per-host and per-field answers
remembered.
"""

from __future__ import annotations

import bisect
import copy
import functools
from collections.abc import Iterable, Mapping
from typing import Any

_INDEX = "_polyccm_instances_by_id"


def _instances_by_id(backend: Any) -> dict[str, Any]:
    """``backend``'s instances by id, built from its reservations on first use and kept up to
    date by :func:`index_instances_by_id`'s ``run_instances`` (moto never removes an instance:
    a terminated one stays listed, as on EC2 for a while)."""
    index: dict[str, Any] | None = backend.__dict__.get(_INDEX)
    if index is None:
        index = {i.id: i for r in list(backend.reservations.values()) for i in r.instances}
        backend.__dict__[_INDEX] = index
    return index


def _find_instance(backend: Any, instance_id: str) -> Any:
    """The instance ``instance_id`` of ``backend``, or ``None``. One not yet indexed (RunInstances
    looks each new instance up before it returns) is searched for from the newest instance
    back, indexing what it passes."""
    index = _instances_by_id(backend)
    found = index.get(instance_id)
    if found is not None:
        return found
    for reservation in reversed(list(backend.reservations.values())):
        for instance in reversed(reservation.instances):
            index.setdefault(instance.id, instance)
            if instance.id == instance_id:
                return instance
    return None


def index_instances_by_id() -> None:
    """Find an instance by id in a dict instead of moto's scan of every reservation.

    moto looks an instance up by walking all instances of the region, so each target that
    RegisterTargets, DescribeTargetHealth or a classic ELB's health registers costs O(instances)
    and a load balancer in front of N nodes O(N^2): minutes at 5,000 nodes, for any CCM. This
    keeps an id -> instance dict per EC2 backend in step with RunInstances (which looks each new
    instance up before it returns); an unknown id gets moto's own answer or error, and so does
    every other lookup."""
    from moto.ec2.models.instances import InstanceBackend

    if getattr(InstanceBackend.run_instances, "polyccm_indexed", False):
        return
    run_instances = InstanceBackend.run_instances
    get = InstanceBackend.get_instance
    get_many = InstanceBackend.get_multi_instances_by_id
    reservations_of = InstanceBackend.get_reservations_by_instance_ids

    @functools.wraps(run_instances)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        reservation = run_instances(self, *args, **kwargs)
        index = _instances_by_id(self)
        for instance in reservation.instances:
            index[instance.id] = instance
        return reservation

    @functools.wraps(InstanceBackend.get_instance_by_id)
    def get_instance_by_id(self: Any, instance_id: str) -> Any:
        return _find_instance(self, instance_id)

    @functools.wraps(get)
    def get_instance(self: Any, instance_id: str) -> Any:
        found = _find_instance(self, instance_id)
        return found if found is not None else get(self, instance_id)  # moto's error

    @functools.wraps(get_many)
    def get_multi_instances_by_id(
        self: Any, instance_ids: list[str], filters: Any = None
    ) -> list[Any]:
        index = _instances_by_id(self)
        found = [index.get(i) for i in instance_ids]
        if any(instance is None for instance in found):
            return list(get_many(self, instance_ids, filters))
        return [i for i in found if i is not None and i.applies(filters)]

    @functools.wraps(reservations_of)
    def get_reservations_by_instance_ids(
        self: Any, instance_ids: list[str], filters: Any = None
    ) -> list[Any]:
        # moto's answer: a copy of each reservation holding a wanted instance, in order, with
        # only the wanted ones; anything unusual (a missing or repeated id) goes to moto.
        index = _instances_by_id(self)
        wanted = set(instance_ids)
        if len(wanted) != len(instance_ids) or any(i not in index for i in wanted):
            return list(reservations_of(self, instance_ids, filters))
        answer = []
        for reservation in list(self.reservations.values()):
            kept = [i for i in reservation.instances if i.id in wanted]
            if kept:
                shown = copy.copy(reservation)
                shown.instances = kept
                answer.append(shown)
        if filters is not None:
            from moto.ec2.utils import filter_reservations

            answer = filter_reservations(answer, filters)
        return answer

    run.polyccm_indexed = True  # type: ignore[attr-defined]
    InstanceBackend.run_instances = run  # type: ignore[method-assign]
    InstanceBackend.get_instance_by_id = get_instance_by_id  # type: ignore[method-assign]
    InstanceBackend.get_instance = get_instance  # type: ignore[method-assign]
    InstanceBackend.get_multi_instances_by_id = get_multi_instances_by_id  # type: ignore[method-assign]
    InstanceBackend.get_reservations_by_instance_ids = get_reservations_by_instance_ids  # type: ignore[method-assign]


def find_an_image_by_id_directly() -> None:
    """Look a launched instance's image up in moto's dict of images instead of matching the
    ``image-id`` filter against each of the ~1,300 images moto knows, which moto does for every
    instance RunInstances makes (most of a 500-instance call's CPU). Only that exact query (one
    image id without wildcards, nothing else) is answered here, with what the filter finds."""
    from moto.ec2.models.amis import AmiBackend

    original = AmiBackend.describe_images
    if getattr(original, "polyccm_direct", False):
        return

    @functools.wraps(original)
    def describe_images(
        self: Any,
        ami_ids: list[str] | None = None,
        filters: dict[str, Any] | None = None,
        exec_users: list[str] | None = None,
        owners: list[str] | None = None,
    ) -> list[Any]:
        wanted = (filters or {}).get("image-id")
        if (
            not ami_ids
            and not exec_users
            and not owners
            and filters is not None
            and len(filters) == 1
            and isinstance(wanted, str)
            and not any(c in wanted for c in "*?[")
        ):
            image = self.amis.get(wanted)
            return [image] if image is not None and image.id == wanted else []
        return list(original(self, ami_ids, filters, exec_users, owners))

    describe_images.polyccm_direct = True  # type: ignore[attr-defined]
    AmiBackend.describe_images = describe_images  # type: ignore[method-assign]


def parse_long_lists_by_binary_search() -> None:
    """Parse a request's list of N structures (a classic ELB's 5,000 ``Instances``) in
    O(N log N) instead of moto's O(N^2).

    Before each structure, moto's query parser asks whether any parameter name starts with the
    structure's prefix by walking every parameter: seconds of CPU for one call that registers
    thousands of instances. The same question is answered here by a binary search in the
    request's sorted parameter names (the first name not below the prefix starts with it if any
    does), so every parse comes out as moto's."""
    from moto.core.parse import QueryParser

    if getattr(QueryParser._gonna_recurse, "polyccm_sorted", False):
        return

    def gonna_recurse(self: Any, query_params: Mapping[str, Any], prefix: str) -> bool:
        if prefix == "":
            return False
        cached = self.__dict__.get("_polyccm_names")
        if cached is None or cached[0] is not query_params:  # one parse, one request's names
            cached = (query_params, sorted(query_params))
            self.__dict__["_polyccm_names"] = cached
        names: list[str] = cached[1]
        at = bisect.bisect_left(names, prefix)
        return not (at < len(names) and names[at].startswith(prefix))

    gonna_recurse.polyccm_sorted = True  # type: ignore[attr-defined]
    QueryParser._gonna_recurse = gonna_recurse  # type: ignore[method-assign]


def read_a_resources_tags_directly() -> None:
    """Read one EC2 resource's tags from moto's dict of tags by its id, instead of through
    DescribeTags' filter, which matches the id's pattern against every tag of the region.

    moto renders each instance and security group with its tags, and the ``tag:``/``tag-key``
    filters read them for every candidate, so each such read cost O(all tags): at 5,000 tagged
    instances a DescribeInstances of 100 ids took ~0.9 s and a tag-filtered DescribeSecurityGroups
    seconds. An id is matched exactly by that filter (an fnmatch pattern anchored at both ends)
    unless it holds a wildcard; such an id goes to moto. The answer is the filter's: the id's tags
    in their dict order, each with moto's resource type."""
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    original = TaggedEC2Resource.get_tags
    if getattr(original, "polyccm_direct", False):
        return

    @functools.wraps(original)
    def get_tags(self: Any) -> list[dict[str, str]]:
        resource_id = self.id
        if not isinstance(resource_id, str) or any(c in resource_id for c in "*?[]\\"):
            return list(original(self))
        if not resource_id:
            return []
        tags = self.ec2_backend.tags.get(resource_id)
        if not tags:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        return [
            {"resource_id": resource_id, "key": key, "value": value, "resource_type": kind}
            for key, value in list(tags.items())
        ]

    get_tags.polyccm_direct = True  # type: ignore[attr-defined]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]


def remember_where_answers_find_their_fields() -> None:
    """Work out once, not for every field of every object rendered, which attribute names
    moto's serializer tries for a field of an answer.

    moto renders an answer by asking, for each field of each object (5,000 instances of
    ~70 fields each), a chain of alias providers which names to try, and most of its CPU for a
    large DescribeInstances or DescribeSecurityGroups goes there. Those names depend only on
    the service, the object's class (and its ``Meta`` aliases), the field's shape and its
    parent's, and the field's key, which key a dict here; the values are then read from the
    object as moto reads them. An object with ``Meta`` aliases of its own (not its class's) is
    left to moto."""
    from moto.core.serialize import XFormedAttributePicker

    original = XFormedAttributePicker.get_possible_keys
    if getattr(original, "polyccm_remembered", False):
        return
    known: dict[tuple[Any, ...], tuple[str, ...]] = {}

    @functools.wraps(original)
    def get_possible_keys(self: Any, context: Any) -> Iterable[str]:
        obj, shape = context.obj, context.shape
        meta = getattr(obj, "Meta", None)
        if shape is None or (meta is not None and meta is not getattr(type(obj), "Meta", None)):
            return original(self, context)
        parent = getattr(shape, "parent", None)
        service = context.service_model
        key = (
            tuple(self.alias_providers),
            service.service_name if service is not None else None,
            type(obj),
            meta,
            shape.name,
            shape.type_name,
            shape.serialization.get("name"),
            None if parent is None else (parent.name, parent.type_name),
            context.key,
        )
        names = known.get(key)
        if names is None:
            names = known[key] = tuple(original(self, context))
        return names

    get_possible_keys.polyccm_remembered = True  # type: ignore[attr-defined]
    XFormedAttributePicker.get_possible_keys = get_possible_keys  # type: ignore[assignment, method-assign]


def remember_which_backend_serves_a_host() -> None:
    """Find the moto backend for a request's host once per host, not on every request.

    For each request moto's dispatcher lists its package's directory (hundreds of entries,
    each checked with ``isdir``) and then tries the URL pattern of every service it knows: a
    tenth of the emulator's CPU in a burst of small calls (RegisterTargets). The answer for a
    host never changes while the emulator runs; a host no backend serves is asked again each
    time, as before."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original = DomainDispatcherApplication.get_backend_for_host
    if getattr(original, "polyccm_remembered", False):
        return
    known: dict[str, Any] = {}

    @functools.wraps(original)
    def get_backend_for_host(self: Any, host: str | None) -> Any:
        if host is None:
            return None
        backend = known.get(host)
        if backend is None:
            backend = original(self, host)
            if backend is not None:
                known[host] = backend
        return backend

    get_backend_for_host.polyccm_remembered = True  # type: ignore[attr-defined]
    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]
