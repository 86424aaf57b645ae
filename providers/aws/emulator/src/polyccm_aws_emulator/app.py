"""A local AWS for tests and demos: moto's server on 127.0.0.1, plus fault injection and counting.

``python -m polyccm_aws_emulator --port PORT`` serves EC2, ELB and ELBv2 (moto, a dependency of
this distribution) behind a small WSGI layer that

* counts every API call per action (``GET /_polyccm/calls``; ``?by=service`` keys them as
  ``ec2:DescribeInstances``, ``elb:...``, ``elbv2:...``; ``?by=agent`` keys them by the caller's
  application id, the ``app/<id>`` botocore puts in its User-Agent from ``AWS_SDK_UA_APP_ID``,
  as ``<id>:DescribeInstances``, ``-:...`` without one; ``?by=caller`` lists each call whose
  User-Agent named its ``polyccm`` process, ``[unix time, caller, action]``,
  :mod:`polyccm_testing.emulation.callers`; ``DELETE`` resets the counters), so tests and
  benchmarks can measure how many cloud calls an operation costs, and who made them;
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

:class:`FaultInjector` is that layer and :func:`build_app` puts it around moto; :mod:`.server`
serves it on loopback only, :class:`~.control.EmulatorControl` is a client of its endpoints.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any
from urllib.parse import parse_qs

from polyccm_testing.emulation.callers import CallerLog, caller_in

from polyccm_aws_emulator.control import CONTROL
from polyccm_aws_emulator.faults import STATUS_BY_CODE, Fault, error_body
from polyccm_aws_emulator.metadata import (
    METADATA,
    InstanceMetadataService,
    StartResponse,
    find_ccm_host,
    text_answer,
)
from polyccm_aws_emulator.moto_fidelity import (
    RULES_QUOTA_VARIABLE,
    apply_rules_quota,
    describe_instance_topology,
    filter_interfaces_by_attachment_status,
    give_classic_elbs_a_default_health_check,
    give_network_load_balancers_their_dns_names,
    give_network_target_groups_their_attributes,
    keep_classic_additional_attributes_unique,
    keep_classic_listeners_instance_protocol,
    keep_ssl_policies_to_tls_listeners,
)
from polyccm_aws_emulator.moto_speedups import (
    find_an_image_by_id_directly,
    index_instances_by_id,
    parse_long_lists_by_binary_search,
    read_a_resources_tags_directly,
    remember_where_answers_find_their_fields,
    remember_which_backend_serves_a_host,
)

# The API version each query-protocol service sends; it tells ELB and ELBv2 apart.
_SERVICE_BY_VERSION = {
    "2016-11-15": "ec2",
    "2012-06-01": "elb",
    "2015-12-01": "elbv2",
    "2011-06-15": "sts",
}

WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _agent(environ: Mapping[str, Any]) -> str:
    """The application id in a request's User-Agent (botocore sends ``app/<id>`` when
    ``AWS_SDK_UA_APP_ID`` is set), or ``-``."""
    for part in str(environ.get("HTTP_USER_AGENT", "")).split():
        if part.startswith("app/") and len(part) > 4:
            return part[4:]
    return "-"


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
        self._callers = CallerLog()
        self._faults: list[Fault] = []

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith(CONTROL):
            return self._control(path, environ, start_response)
        if path.startswith(METADATA):
            if self._metadata is None:
                return text_answer(start_response, 404, "no instance metadata service")
            return self._metadata(environ, start_response)
        action, service = self._identify(environ)
        fault: Fault | None = None
        with self._lock:
            if action:
                self._calls[action] += 1
                self._by_service[f"{service}:{action}"] += 1
                self._by_agent[f"{_agent(environ)}:{action}"] += 1
                self._callers.record(
                    caller_in([environ.get("HTTP_USER_AGENT")]), f"{service}:{action}"
                )
                fault = next((f for f in self._faults if f.matches(action, service)), None)
                if fault is not None and fault.after:
                    fault.after -= 1
                    fault = None
                elif fault is not None:
                    fault.count -= 1
                    self._faults = [f for f in self._faults if f.count > 0]
        if fault is None:
            if service == "ec2" and action == "DescribeInstanceTopology":
                return describe_instance_topology(environ, start_response)
            return self._app(environ, start_response)
        status = fault.status or STATUS_BY_CODE.get(fault.code, 503)
        body = error_body(service, fault.code, f"injected by polyccm emulator ({action})")
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
                if "by=caller" in query:
                    return self._callers.calls()
                return dict(self._by_agent if "by=agent" in query else self._calls)
            if name == "calls" and method == "DELETE":
                self._calls.clear()
                self._by_service.clear()
                self._by_agent.clear()
                self._callers.clear()
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
                self._callers.clear()
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


def build_app() -> FaultInjector:
    """moto's multi-service WSGI app wrapped in the fault injector, with the emulated instance
    metadata service and AWS's default health check on new classic ELBs."""
    from moto.moto_api._internal.models import moto_api_backend
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from polyccm_aws_emulator.moto_lookups import look_up_directly
    from polyccm_aws_emulator.moto_rendering import render_answers_faster
    from polyccm_aws_emulator.moto_requests import receive_requests_cheaply

    give_classic_elbs_a_default_health_check()
    filter_interfaces_by_attachment_status()
    give_network_load_balancers_their_dns_names()
    keep_classic_listeners_instance_protocol()
    keep_classic_additional_attributes_unique()
    keep_ssl_policies_to_tls_listeners()
    give_network_target_groups_their_attributes()
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
