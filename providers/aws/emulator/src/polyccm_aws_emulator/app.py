"""A local AWS for tests and demos: moto's server on 127.0.0.1, plus fault injection and counting.

``python -m polyccm_aws.emulator --port PORT`` serves EC2, ELB and ELBv2 (moto, installed with
the ``emulator`` extra) behind a small WSGI layer that

* counts every API call per action (``GET /_polyccm/calls``; ``?by=service`` keys them as
  ``ec2:DescribeInstances``, ``elb:...``, ``elbv2:...``; ``?by=agent`` keys them by the caller's
  application id, the ``app/<id>`` botocore puts in its User-Agent from ``AWS_SDK_UA_APP_ID``,
  as ``<id>:DescribeInstances``, ``-:...`` without one; ``DELETE`` resets the counters), so
  tests and benchmarks can measure how many cloud calls an operation costs, and who made them;
* fails the next N calls of an action on request (``POST /_polyccm/faults`` with JSON
  ``{"action": "DescribeInstances", "count": 2, "code": "RequestLimitExceeded"}``; ``code`` may
  also be ``Throttling``, ``ServiceUnavailable`` (HTTP 503) or ``InternalError`` (HTTP 500);
  ``action`` ``*`` matches every call; ``DELETE`` clears pending faults);
* resets everything, moto's state included, on ``POST /_polyccm/reset``;
* gives a new classic ELB AWS's default health check (moto gives none), and answers EC2's
  DescribeInstanceTopology (moto fails it) as AWS does;
* enforces the account's quota of rules per security group given in
  ``POLYCCM_AWS_RULES_PER_SECURITY_GROUP`` (AWS's default, 60, without it);
* answers as the instance metadata service (IMDSv2: ``PUT /latest/api/token``, then
  ``GET /latest/meta-data/...`` with the token) of the instance tagged
  ``polyccm.dev/ccm-host=true``, so that "the instance polyccm runs on" is chosen through the
  cloud's own API (``RunInstances``/``CreateTags``). moto's own metadata would name a fixed fake
  instance that does not exist. Point boto3 here with ``AWS_EC2_METADATA_SERVICE_ENDPOINT``.

:class:`EmulatorControl` is a tiny client of those endpoints. Only loopback addresses are served.
"""

from __future__ import annotations

import argparse
import bisect
import copy
import functools
import io
import ipaddress
import json
import logging
import os
import re
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs

CONTROL = "/_polyccm/"
HEALTH_PATH = CONTROL + "health"
METADATA = "/latest/"
#: The tag that makes an instance the one the emulated instance metadata service describes.
CCM_HOST_TAG = "polyccm.dev/ccm-host"

# The API version each query-protocol service sends; it tells ELB and ELBv2 apart.
_SERVICE_BY_VERSION = {
    "2016-11-15": "ec2",
    "2012-06-01": "elb",
    "2015-12-01": "elbv2",
    "2011-06-15": "sts",
}
_STATUS_BY_CODE = {
    "RequestLimitExceeded": 503,
    "Throttling": 400,
    "ThrottlingException": 400,
    "ServiceUnavailable": 503,
    "InternalError": 500,
}

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass
class Fault:
    """Fail the next ``count`` calls of ``action`` (optionally only for ``service``)."""

    action: str
    count: int = 1
    code: str = "RequestLimitExceeded"
    status: int | None = None
    service: str | None = None

    def matches(self, action: str, service: str) -> bool:
        return self.count > 0 and self.action in ("*", action) and self.service in (None, service)


def _error_body(service: str, code: str, message: str) -> bytes:
    if service == "ec2":
        return (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
            f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>polyccm-fault</RequestID></Response>"
        ).encode()
    return (
        "<ErrorResponse><Error><Type>Sender</Type>"
        f"<Code>{code}</Code><Message>{message}</Message></Error>"
        "<RequestId>polyccm-fault</RequestId></ErrorResponse>"
    ).encode()


#: What the emulated metadata service knows of one instance: path under ``meta-data/`` -> value.
HostMetadata = Mapping[str, str]


class InstanceMetadataService:
    """IMDSv2 for one instance, found anew on every request by ``find_host``.

    Tokens come from ``PUT /latest/api/token`` (which, as on EC2, needs the TTL header) and are
    required on every ``GET``; without a host instance every path answers 404, as a machine
    outside EC2 would leave the caller without an answer.
    """

    TOKEN_HEADER = "HTTP_X_AWS_EC2_METADATA_TOKEN"
    TTL_HEADER = "HTTP_X_AWS_EC2_METADATA_TOKEN_TTL_SECONDS"

    def __init__(self, find_host: Callable[[], HostMetadata | None]) -> None:
        self._find_host = find_host
        self._tokens: set[str] = set()
        self._lock = threading.Lock()

    def forget_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))[len(METADATA) :]
        method = str(environ.get("REQUEST_METHOD", "GET"))
        if path == "api/token":
            if method != "PUT":
                return _text(start_response, 405, "use PUT for a token")
            if not environ.get(self.TTL_HEADER):
                return _text(start_response, 400, "missing token TTL header")
            token = uuid.uuid4().hex
            with self._lock:
                self._tokens.add(token)
            return _text(start_response, 200, token)
        with self._lock:
            authorised = environ.get(self.TOKEN_HEADER) in self._tokens
        if not authorised:
            return _text(start_response, 401, "a session token is required (IMDSv2)")
        host = self._find_host()
        if host is None or not path.startswith("meta-data/"):
            return _text(start_response, 404, "not found")
        key = path[len("meta-data/") :].strip("/")
        if not key:
            return _text(start_response, 200, "\n".join(sorted(host)))
        value = host.get(key)
        if value is None:
            return _text(start_response, 404, "not found")
        return _text(start_response, 200, value)


def _text(start_response: StartResponse, status: int, body: str) -> Iterable[bytes]:
    data = body.encode()
    start_response(
        f"{status} {'OK' if status == 200 else 'Error'}",
        [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))],
    )
    return [data]


def _agent(environ: Mapping[str, Any]) -> str:
    """The application id in a request's User-Agent (botocore sends ``app/<id>`` when
    ``AWS_SDK_UA_APP_ID`` is set), or ``-``."""
    for part in str(environ.get("HTTP_USER_AGENT", "")).split():
        if part.startswith("app/") and len(part) > 4:
            return part[4:]
    return "-"


#: The instance types DescribeInstanceTopology describes (AWS's API reference lists these
#: families); it leaves every other instance out of its answer.
TOPOLOGY_INSTANCE_TYPES = re.compile(
    r"^(hpc6a|hpc6id|hpc7a|hpc7g|p3dn|p4d|p4de|p5|p5e|trn1|trn1n)\."
)


def describe_instance_topology(
    environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """EC2's DescribeInstanceTopology, which moto lacks (it answers 500): the instances asked
    for (``InstanceId.N``; all of the region without), those of a supported type each with three
    network nodes, the others left out, as AWS answers."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    params = parse_qs(str(environ.get("QUERY_STRING", "")))
    params.update(parse_qs(body.decode("utf-8", "replace")))
    wanted = {v[0] for k, v in params.items() if k.startswith("InstanceId.")}
    scope = str(environ.get("HTTP_AUTHORIZATION", "")).split("Credential=", 1)[-1].split("/")
    region = scope[2] if len(scope) > 2 else "us-east-1"
    items = []
    for instance in ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances():
        if wanted and instance.id not in wanted:
            continue
        if not TOPOLOGY_INSTANCE_TYPES.match(str(instance.instance_type)):
            continue
        digest = uuid.uuid5(uuid.NAMESPACE_OID, str(instance.id)).hex
        nodes = "".join(f"<item>nn-{digest[i * 8 : i * 8 + 8]}</item>" for i in range(3))
        items.append(
            f"<item><instanceId>{instance.id}</instanceId>"
            f"<instanceType>{instance.instance_type}</instanceType>"
            f"<availabilityZone>{instance.placement.zone}</availabilityZone>"
            f"<networkNodeSet>{nodes}</networkNodeSet></item>"
        )
    answer = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<DescribeInstanceTopologyResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId><instanceSet>{''.join(items)}</instanceSet>"
        "</DescribeInstanceTopologyResponse>"
    ).encode()
    start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", str(len(answer)))])
    return [answer]


class FaultInjector:
    """WSGI middleware around moto: counts calls, injects faults, serves the control endpoints
    and the instance metadata service."""

    def __init__(
        self,
        app: WsgiApp,
        reset_backends: Callable[[], None] | None = None,
        metadata: InstanceMetadataService | None = None,
    ) -> None:
        self._app = app
        self._reset_backends = reset_backends
        self._metadata = metadata
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._by_service: Counter[str] = Counter()
        self._by_agent: Counter[str] = Counter()
        self._faults: list[Fault] = []

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith(CONTROL):
            return self._control(path, environ, start_response)
        if path.startswith(METADATA):
            if self._metadata is None:
                return _text(start_response, 404, "no instance metadata service")
            return self._metadata(environ, start_response)
        action, service = self._identify(environ)
        fault: Fault | None = None
        with self._lock:
            if action:
                self._calls[action] += 1
                self._by_service[f"{service}:{action}"] += 1
                self._by_agent[f"{_agent(environ)}:{action}"] += 1
                fault = next((f for f in self._faults if f.matches(action, service)), None)
                if fault is not None:
                    fault.count -= 1
                    self._faults = [f for f in self._faults if f.count > 0]
        if fault is None:
            if service == "ec2" and action == "DescribeInstanceTopology":
                return describe_instance_topology(environ, start_response)
            return self._app(environ, start_response)
        status = fault.status or _STATUS_BY_CODE.get(fault.code, 503)
        body = _error_body(service, fault.code, f"injected by polyccm emulator ({action})")
        start_response(
            f"{status} Injected",
            [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))],
        )
        return [body]

    @staticmethod
    def _identify(environ: dict[str, Any]) -> tuple[str, str]:
        """The API action and service of a query-protocol request; the body is put back."""
        params = FaultInjector._action_and_version(str(environ.get("QUERY_STRING", "")))
        if str(environ.get("CONTENT_TYPE", "")).startswith("application/x-www-form-urlencoded"):
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
            params.update(FaultInjector._action_and_version(body.decode("utf-8", "replace")))
        action = params.get("Action", "")
        service = _SERVICE_BY_VERSION.get(params.get("Version", ""), "")
        if not service:
            auth = str(environ.get("HTTP_AUTHORIZATION", ""))
            scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
            service = scope[3] if len(scope) > 3 else "unknown"
        return action, service

    @staticmethod
    def _action_and_version(query: str) -> dict[str, str]:
        """The first non-blank ``Action`` and ``Version`` of a query string, as ``parse_qs``
        finds them, reading its parameters from the first only until both are found (botocore
        sends them first; a RegisterTargets of 200 targets has 400 more). A parameter named in
        an encoded form on the way makes it decode the whole query instead."""
        from urllib.parse import unquote

        found: dict[str, str] = {}
        start = 0
        while start <= len(query) and len(found) < 2:
            end = query.find("&", start)
            end = len(query) if end < 0 else end
            name, _, value = query[start:end].partition("=")
            if "%" in name or "+" in name:
                params = parse_qs(query)
                return {k: params[k][0] for k in ("Action", "Version") if k in params}
            if value and name in ("Action", "Version") and name not in found:
                found[name] = unquote(value.replace("+", " "), errors="replace")
            start = end + 1
        return found

    def _control(
        self, path: str, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        name = path[len(CONTROL) :].strip("/")
        try:
            answer = self._handle(method, name, environ)
        except (ValueError, TypeError, KeyError) as error:
            return self._json(start_response, 400, {"error": str(error)})
        if answer is None:
            return self._json(start_response, 404, {"error": f"no {method} {path}"})
        return self._json(start_response, 200, answer)

    def _handle(self, method: str, name: str, environ: dict[str, Any]) -> object | None:
        with self._lock:
            if name == "health":
                return {"ok": True}
            if name == "calls" and method == "GET":
                query = str(environ.get("QUERY_STRING", ""))
                if "by=service" in query:
                    return dict(self._by_service)
                return dict(self._by_agent if "by=agent" in query else self._calls)
            if name == "calls" and method == "DELETE":
                self._calls.clear()
                self._by_service.clear()
                self._by_agent.clear()
                return {}
            if name == "faults" and method == "POST":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                spec = json.loads(environ["wsgi.input"].read(length) or b"{}")
                self._faults.append(Fault(**spec))
                return [asdict(f) for f in self._faults]
            if name == "faults" and method == "GET":
                return [asdict(f) for f in self._faults]
            if name == "faults" and method == "DELETE":
                self._faults.clear()
                return []
            if name == "reset" and method == "POST":
                self._faults.clear()
                self._calls.clear()
                self._by_service.clear()
                self._by_agent.clear()
                if self._reset_backends is not None:
                    self._reset_backends()
                if self._metadata is not None:
                    self._metadata.forget_tokens()
                return {}
        return None

    @staticmethod
    def _json(start_response: StartResponse, status: int, payload: object) -> Iterable[bytes]:
        body = json.dumps(payload).encode()
        start_response(
            f"{status} {'OK' if status == 200 else 'Error'}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]


class EmulatorControl:
    """A client of the emulator's control endpoints (``endpoint`` is ``http://127.0.0.1:PORT``)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")

    def _request(self, method: str, name: str, payload: object | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"{self.endpoint}{CONTROL}{name}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def inject(
        self,
        action: str,
        *,
        count: int = 1,
        code: str = "RequestLimitExceeded",
        status: int | None = None,
        service: str | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``action`` fail with ``code``."""
        fault = Fault(action=action, count=count, code=code, status=status, service=service)
        self._request("POST", "faults", asdict(fault))

    def clear_faults(self) -> None:
        self._request("DELETE", "faults")

    def calls(self, *, by_service: bool = False) -> Mapping[str, int]:
        """Calls per action since the last reset."""
        result: Mapping[str, int] = self._request(
            "GET", "calls?by=service" if by_service else "calls"
        )
        return result

    def calls_by_agent(self) -> dict[str, Counter[str]]:
        """Calls per action since the last reset, per caller: the application id its
        User-Agent carries (``AWS_SDK_UA_APP_ID``), ``-`` for callers without one."""
        answer: Mapping[str, int] = self._request("GET", "calls?by=agent")
        result: dict[str, Counter[str]] = {}
        for key, count in answer.items():
            agent, action = key.rsplit(":", 1)
            result.setdefault(agent, Counter())[action] += count
        return result

    def reset_calls(self) -> None:
        self._request("DELETE", "calls")

    def reset(self) -> None:
        """Forget every fault, counter and cloud resource."""
        self._request("POST", "reset")


def _require_loopback(host: str) -> None:
    if host == "localhost":
        return
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to serve on {host}: the emulator only serves loopback")


def find_ccm_host() -> HostMetadata | None:
    """The metadata of the first live instance tagged ``polyccm.dev/ccm-host=true``, searched
    in every account and region moto has state for; ``None`` when there is none."""
    from moto.ec2.models import ec2_backends

    for regions in list(ec2_backends.values()):
        for backend in list(regions.values()):
            for instance in backend.all_instances():
                if instance._state.name == "terminated":
                    continue
                tags = {t["key"]: t["value"] for t in instance.get_tags()}
                if tags.get(CCM_HOST_TAG) != "true":
                    continue
                zone = str(instance.placement.zone or "")
                return {
                    "instance-id": str(instance.id),
                    "instance-type": str(instance.instance_type),
                    "placement/availability-zone": zone,
                    "placement/region": str(instance.region_name),
                    "local-ipv4": str(instance.private_ip or ""),
                    "local-hostname": str(instance.private_dns_name or ""),
                }
    return None


#: The health check AWS gives a classic ELB made without ConfigureHealthCheck (the API's default
#: in AWS's Classic Load Balancer guide: a TCP ping every 30 s, 5 s timeout, unhealthy after 2
#: failures, healthy after 10 successes), pinging the first listener's instance port.
DEFAULT_ELB_HEALTH_CHECK = {
    "interval": "30",
    "timeout": "5",
    "unhealthy_threshold": "2",
    "healthy_threshold": "10",
}


def give_classic_elbs_a_default_health_check() -> None:
    """Make moto answer as AWS does: a classic ELB has a health check from its creation. moto
    leaves it out until ConfigureHealthCheck, and a client that reads it first (upstream's AWS
    CCM does) fails on the missing field."""
    from moto.elb.models import ELBBackend

    original = ELBBackend.create_load_balancer
    if getattr(original, "polyccm_default_health_check", False):
        return

    @functools.wraps(original)
    def create_load_balancer(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        balancer = original(self, name, *args, **kwargs)
        if balancer.health_check is None and balancer.listeners:
            port = balancer.listeners[0].instance_port
            self.configure_health_check(name, target=f"TCP:{port}", **DEFAULT_ELB_HEALTH_CHECK)
        return balancer

    create_load_balancer.polyccm_default_health_check = True  # type: ignore[attr-defined]
    ELBBackend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]


#: Sets the emulated account's quota of rules per VPC security group: AWS's default is 60 and
#: an account may have it raised (Service Quotas), as a cluster with hundreds of load balancers
#: needs (each adds rules to the nodes' group). Unset: AWS's default.
RULES_QUOTA_VARIABLE = "POLYCCM_AWS_RULES_PER_SECURITY_GROUP"


def apply_rules_quota(quota: int) -> None:
    """Refuse a rule that would take a VPC security group past ``quota`` rules, as AWS does
    past the account's quota (moto's own check has AWS's default, 60, built in)."""
    from moto.ec2.exceptions import RulesPerSecurityGroupLimitExceededError
    from moto.ec2.models.security_groups import SecurityGroupBackend

    def verify(
        self: Any, group: Any, current: int, ip_ranges: Any, *rest: Any, **named: Any
    ) -> None:
        del self
        sources = named.get("source_groups", rest[0] if rest else None)
        limit = quota if group.vpc_id else max(quota, 100)
        if current + len(ip_ranges or ()) + len(sources or ()) > limit:
            raise RulesPerSecurityGroupLimitExceededError

    check = "_verify_group_will_respect_rule_count_limit"
    setattr(SecurityGroupBackend, check, verify)  # moto's own check, replaced


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


def build_app() -> FaultInjector:
    """moto's multi-service WSGI app wrapped in the fault injector, with the emulated instance
    metadata service and AWS's default health check on new classic ELBs."""
    from moto.moto_api._internal.models import moto_api_backend
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from polyccm_aws.moto_lookups import look_up_directly
    from polyccm_aws.moto_rendering import render_answers_faster
    from polyccm_aws.moto_requests import receive_requests_cheaply

    give_classic_elbs_a_default_health_check()
    index_instances_by_id()
    parse_long_lists_by_binary_search()
    find_an_image_by_id_directly()
    read_a_resources_tags_directly()
    remember_where_answers_find_their_fields()
    remember_which_backend_serves_a_host()
    receive_requests_cheaply()
    render_answers_faster()
    look_up_directly()
    quota = os.environ.get(RULES_QUOTA_VARIABLE)
    if quota:
        apply_rules_quota(int(quota))
    return FaultInjector(
        DomainDispatcherApplication(create_backend_app),
        moto_api_backend.reset,
        InstanceMetadataService(find_ccm_host),
    )


def serve(host: str, port: int, *, verbose: bool = False) -> None:
    """Serve until interrupted."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    _require_loopback(host)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if not verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server(host, port, build_app(), threaded=True, request_handler=MotoRequestHandler)
    print(f"polyccm AWS emulator on http://{host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, required=True, help="port to serve on")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    serve(args.host, args.port, verbose=args.verbose)


if __name__ == "__main__":
    main()
