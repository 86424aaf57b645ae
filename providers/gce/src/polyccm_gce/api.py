"""The compute v1 API of one project through google-cloud-compute's typed clients, and the single
place where its errors become polyccm errors.

Clients (``compute_v1.RoutesClient``...) are built by :func:`compute_client` over REST with
``client_options.api_endpoint`` from gce.conf's ``api-endpoint``. The SDK's hook for every
request it sends is the REST transport's interceptor: :class:`_Fence` passes each one, retries,
list pages and operation polls included, through :func:`polyccm.cloudcalls.record` under its
discovery method id (``compute.routes.insert``), so it is counted and refused once this process
has lost leadership. The SDK's ExtendedOperation polling builds its zone, region and global
operations clients with default options (compute.googleapis.com); :func:`compute_client` gives
it clients on the same endpoint. The provider itself awaits operations with ``operations.wait``
on the operation's own scope, cut every ``poll_timeout`` seconds and asked again.

Legacy ``httpHealthChecks`` have no client in google-cloud-compute (it only has the newer
``healthChecks``), and upstream's network load balancer uses the legacy ones: those requests
alone (:meth:`GceApi.rest`) go through google-auth's ``AuthorizedSession`` (the session the
SDK's REST transport uses) to ``{api-endpoint}projects/P/global/httpHealthChecks``, with the
same fence, retries and errors.

Every request carries :func:`polyccm.useragent.cloud_user_agent` (``polyccm/<version>
polyccm-identity/<leader-election identity>``): the SDK's clients through their ``client_info``
(``x-goog-api-client``), the legacy requests in their User-Agent, as upstream's CCM sets its
services' ``UserAgent`` (cloud-provider-gcp providers/gce/gce.go:580-608 @4e24531).

Every call goes through :meth:`GceApi.invoke` (the SDK's own retries are turned off so that each
attempt is ours to count): rate-limit answers (403 ``rateLimitExceeded``/``userRateLimitExceeded``,
429) and 5xx are retried with jittered exponential backoff; what still fails is raised as
:class:`GceApiError`, whose message names the method, status and reason, so a controller logs
it, reports it as an event and re-queues the item. A resource quota (403 ``quotaExceeded``, or an
operation ending ``QUOTA_EXCEEDED``) is not retried here: it does not lift in seconds, so the
controller's backoff retries it. The access token is registered with the log redaction as soon
as google-auth obtains it.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import requests
from google.api_core import exceptions as core_exceptions
from google.api_core.client_options import ClientOptions
from google.api_core.gapic_v1.client_info import ClientInfo
from google.auth.exceptions import RefreshError
from google.auth.transport.requests import AuthorizedSession
from polyccm import cloudcalls, logredact, useragent
from polyccm.errors import CloudError, ConfigError

from polyccm_gce.sdk import compute_v1

log = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")
C = TypeVar("C")

#: The scope the provider asks application-default credentials for.
SCOPES = ("https://www.googleapis.com/auth/compute",)
RATE_LIMIT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded"})
QUOTA_REASONS = frozenset({"quotaExceeded", "QUOTA_EXCEEDED"})
FIELD_MASK_HEADER = "x-goog-fieldmask"
"""The header form of Google's ``fields`` system parameter (a partial response); the SDK sends
a call's ``metadata`` as headers, and has no ``fields`` of its own."""
#: The polling client of each kind of ExtendedOperation (keys of the SDK's transport table).
OPERATION_CLIENTS: Mapping[str, str] = {
    "zone_operations": "ZoneOperationsClient",
    "region_operations": "RegionOperationsClient",
    "global_operations": "GlobalOperationsClient",
}


class GceApiError(CloudError):
    """A compute API call failed (after the retries, for retryable errors)."""

    def __init__(
        self, method: str, status: int, reason: str, message: str, attempts: int = 1
    ) -> None:
        retried = f" after {attempts} attempts" if attempts > 1 else ""
        kind = ""
        if reason in RATE_LIMIT_REASONS or status == 429:
            kind = " (rate limited)"
        elif reason in QUOTA_REASONS:
            kind = " (quota exceeded)"
        super().__init__(f"GCE {method} failed{retried}{kind}: {status} {reason}: {message}")
        self.method = method
        self.status = status
        self.reason = reason
        self.attempts = attempts

    @property
    def not_found(self) -> bool:
        return self.status == 404 or self.reason == "RESOURCE_NOT_FOUND"

    @property
    def in_use(self) -> bool:
        """Another resource still uses the one this call would delete."""
        return self.reason == "resourceInUseByAnotherResource"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 or self.reason == "RESOURCE_ALREADY_EXISTS"

    @property
    def retryable(self) -> bool:
        return self.status in (0, 429, 500, 502, 503, 504) or (
            self.status == 403 and self.reason in RATE_LIMIT_REASONS
        )


class OperationFailed(GceApiError):
    """A mutation was accepted but its operation ended DONE with ``error``."""


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word.title() for word in rest)


def method_id(client_class: type[Any], rpc: str) -> str:
    """The discovery method id of ``client_class``'s ``rpc``: ``TargetPoolsClient`` and
    ``add_instance_unary`` are ``compute.targetPools.addInstance``."""
    resource = re.sub(r"(RestTransport|Client)$", "", client_class.__name__)
    rpc = re.sub(r"_unary$", "", rpc)
    return f"compute.{resource[:1].lower()}{resource[1:]}.{_camel(rpc)}"


def _where(request: Any) -> tuple[str, str]:
    """The region and zone a request names ("" where it names none), for upstream's
    ``cloudprovider_gce_api_*`` labels."""
    region = getattr(request, "region", "")
    zone = getattr(request, "zone", "")
    return (region if isinstance(region, str) else ""), (zone if isinstance(zone, str) else "")


class _Fence:
    """The REST interceptor of one client: each request, before it is sent, passes
    :func:`cloudcalls.record` (counted; :class:`~polyccm.errors.LeadershipLost` once the term
    is over). Answers pass unchanged. It answers every ``pre_*``/``post_*`` hook the SDK's
    generated interceptor class has, whatever the client."""

    def __init__(self, client_class: type[Any]) -> None:
        self.client_class = client_class

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("pre_"):
            method = method_id(self.client_class, name[4:])

            def record(request: Any, metadata: Any) -> tuple[Any, Any]:
                region, zone = _where(request)
                cloudcalls.record("gce", method, region=region, zone=zone)
                return request, metadata

            return record
        if name.startswith("post_") and name.endswith("_with_metadata"):
            return lambda response, metadata: (response, metadata)
        if name.startswith("post_"):
            answered = method_id(self.client_class, name[5:])

            def answer(response: Any) -> Any:
                cloudcalls.record_answer("gce", answered)
                return response

            return answer
        raise AttributeError(name)


def sdk_endpoint(endpoint: str) -> str:
    """``client_options.api_endpoint`` for a compute base URL as gce.conf's ``api-endpoint``
    gives it (``http://127.0.0.1:8085/compute/v1/`` is ``http://127.0.0.1:8085``): the SDK
    adds ``/compute/v1/`` itself."""
    match = re.fullmatch(r"(https?://[^/]+)/compute/v1/?", endpoint)
    if match is None:
        raise ConfigError(f"api-endpoint {endpoint!r} must end with /compute/v1/")
    return match.group(1)


def compute_client(client_class: type[C], api_endpoint: str, credentials: Any) -> C:
    """A google-cloud-compute client over REST on ``api_endpoint`` (``client_options``), whose
    requests all pass :class:`_Fence`, and whose ExtendedOperation polling clients use the
    same endpoint, credentials and fence (the SDK would build them for compute.googleapis.com).
    """
    transport_class = client_class.get_transport_class("rest")  # type: ignore[attr-defined]

    def transport(**options: Any) -> Any:
        return transport_class(interceptor=_Fence(client_class), **options)

    client = client_class(  # type: ignore[call-arg]
        credentials=credentials,
        client_options=ClientOptions(api_endpoint=api_endpoint),
        client_info=ClientInfo(user_agent=useragent.cloud_user_agent()),  # type: ignore[no-untyped-call]
        transport=transport,
    )
    polling = getattr(client.transport, "_extended_operations_services", None)  # type: ignore[attr-defined]
    if polling is not None:
        for key, class_name in OPERATION_CLIENTS.items():
            operations_class = getattr(compute_v1, class_name)
            polling[key] = compute_client(operations_class, api_endpoint, credentials)
    return client


def _translate(method: str, error: Exception, attempts: int) -> GceApiError:
    """An SDK or transport error as :class:`GceApiError` (status 0: no HTTP answer; a token
    that could not be had, from ``token-url`` or the metadata server, is one too)."""
    if isinstance(error, core_exceptions.GoogleAPICallError):
        reasons = [e.get("reason", "") for e in error.errors or () if isinstance(e, dict)]
        status = int(error.code or 0)
        return GceApiError(method, status, reasons[0] if reasons else "", error.message, attempts)
    return GceApiError(method, 0, type(error).__name__, str(error), attempts)


def _rest_error(method: str, response: requests.Response, attempts: int) -> GceApiError:
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    reasons = [item.get("reason", "") for item in error.get("errors", ()) if isinstance(item, dict)]
    message = str(error.get("message") or response.reason or "")
    reason = reasons[0] if reasons else ""
    return GceApiError(method, response.status_code, reason, message, attempts)


class GceApi:
    """One project's compute API. ``endpoint`` is gce.conf's v1 base URL ending in ``/``; the
    typed clients are made on first use (one per kind, shared by threads, as Google's clients
    may be) by :meth:`client`.

    ``max_attempts`` bounds the attempts of one call; ``backoff`` is the first pause (doubled
    each time, jittered, at most 4 s). Operation waits are cut every ``poll_timeout`` seconds
    and asked again (each poll passes the leadership fence) until ``operation_timeout``.
    """

    def __init__(
        self,
        project: str,
        endpoint: str,
        credentials: Any,
        *,
        max_attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 10.0,
        concurrency: int = 10,
        poll_timeout: float = 5.0,
        operation_timeout: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.project = project
        self.endpoint = endpoint if endpoint.endswith("/") else endpoint + "/"
        self.api_endpoint = sdk_endpoint(self.endpoint)
        self.credentials = credentials
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout = timeout
        self.concurrency = concurrency
        self.poll_timeout = poll_timeout
        self.operation_timeout = operation_timeout
        self._sleep = sleep
        self._clients: dict[type[Any], Any] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._known_token: str | None = None

    @property
    def base(self) -> str:
        """The URL of the project: ``{endpoint}projects/{project}/``."""
        return f"{self.endpoint}projects/{self.project}/"

    def client(self, client_class: type[C]) -> C:
        """The project's ``client_class`` (``compute_v1.RoutesClient``...)."""
        with self._lock:
            made = self._clients.get(client_class)
            if made is None:
                made = compute_client(client_class, self.api_endpoint, self.credentials)
                self._clients[client_class] = made
            return made

    def _guard_token(self) -> None:
        token = getattr(self.credentials, "token", None)
        if token and token != self._known_token:
            logredact.add_secret(token)
            self._known_token = token

    def invoke(self, rpc: Callable[..., T], **fields: Any) -> T:
        """``rpc`` (a typed client's method: ``api.client(RoutesClient).insert_unary``) with
        ``fields`` (its flattened fields, or ``request=``): its answer. Retries what is
        retryable; raises :class:`GceApiError` named after the method."""
        method = method_id(type(rpc.__self__), rpc.__name__)  # type: ignore[attr-defined]
        attempt = 0
        while True:
            attempt += 1
            try:
                return rpc(**fields, retry=None, timeout=self.timeout)
            except (
                core_exceptions.GoogleAPICallError,
                requests.RequestException,
                RefreshError,
            ) as error:
                failure = _translate(method, error, attempt)
            finally:
                self._guard_token()
            cloudcalls.record_error("gce", method)
            if failure.retryable and attempt < self.max_attempts:
                log.info("%s; retrying", failure)
                self._pause(attempt)
                continue
            raise failure

    def _pause(self, attempt: int) -> None:
        delay = min(4.0, self.backoff * 2 ** (attempt - 1))
        self._sleep(delay * random.uniform(0.5, 1.0))

    def pages_of(self, rpc: Callable[..., Any], *, mask: str = "", **request: Any) -> Iterator[Any]:
        """Each page of a list (``max_results`` 500, following ``next_page_token``), each
        asked with :meth:`call` (the SDK's pager would fetch the next ones unretried).
        ``mask``: the fields the pages are to hold (the partial-response syntax of Google's
        ``fields`` parameter, sent as its header ``X-Goog-FieldMask``); empty: every field."""
        query: dict[str, Any] = {"project": self.project, "max_results": 500, **request}
        extra: dict[str, Any] = {"metadata": ((FIELD_MASK_HEADER, mask),)} if mask else {}
        while True:
            pager = self.invoke(rpc, request=query, **extra)
            page = next(iter(pager.pages))
            yield page
            if not page.next_page_token:
                return
            query["page_token"] = page.next_page_token

    def items(self, rpc: Callable[..., Any], **request: Any) -> list[Any]:
        """Every item of a list (``filter=`` and the list's scope fields as keywords)."""
        return [item for page in self.pages_of(rpc, **request) for item in page.items]

    def aggregated_items(
        self, rpc: Callable[..., Any], key: str, *, fields: str = "", **request: Any
    ) -> list[Any]:
        """Every item of an aggregatedList (``key`` names the items: ``instances``), all
        scopes; ``fields``: the items' fields to ask for (``name,zone``; empty: all). Decoding
        a whole instance costs the SDK about ten times what its name, zone and addresses do."""
        mask = f"items/*/{key}({fields}),nextPageToken" if fields else ""
        found: list[Any] = []
        for page in self.pages_of(rpc, mask=mask, **request):
            for scoped in page.items.values():
                found.extend(getattr(scoped, key))
        return found

    def run(
        self, rpc: Callable[..., compute_v1.Operation], *, project: str = "", **fields: Any
    ) -> compute_v1.Operation:
        """A mutation (an ``*_unary`` method) in ``project`` (default: this API's; a Shared
        VPC's host project for its firewalls), awaited; :class:`GceApiError` or
        :class:`OperationFailed`."""
        return self.finish(self.invoke(rpc, project=project or self.project, **fields))

    def finish(self, operation: compute_v1.Operation) -> compute_v1.Operation:
        """Wait for ``operation`` to be DONE (``operations.wait`` on its scope, repeated while
        GCE returns it unfinished); :class:`OperationFailed` when it ended with an error."""
        scope: dict[str, str] = {}
        operations: type[Any] = compute_v1.GlobalOperationsClient
        if operation.zone:
            scope, operations = {"zone": _last(operation.zone)}, compute_v1.ZoneOperationsClient
        elif operation.region:
            scope = {"region": _last(operation.region)}
            operations = compute_v1.RegionOperationsClient
        rpc: Callable[..., compute_v1.Operation] = self.client(operations).wait
        method = method_id(operations, "wait")
        deadline = time.monotonic() + self.operation_timeout
        while operation.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise GceApiError(method, 0, "timeout", f"operation {operation.name} not done")
            operation = self._poll(method, rpc, operation.name, scope, operation) or operation
        if operation.error.errors:
            first = operation.error.errors[0]
            message = first.message or operation.http_error_message
            raise OperationFailed(
                f"{operation.operation_type or 'operation'} {_last(operation.target_link)}",
                operation.http_error_status_code or 400,
                first.code,
                message,
            )
        return operation

    def _poll(
        self,
        method: str,
        rpc: Callable[..., compute_v1.Operation],
        name: str,
        scope: Mapping[str, str],
        operation: compute_v1.Operation,
    ) -> compute_v1.Operation | None:
        """One ``operations.wait``, cut at ``poll_timeout`` (GCE holds it up to two minutes):
        ``None`` when it was cut, so the caller asks again. Each poll passes the fence, so a
        lost term stops waiting within ``poll_timeout``."""
        try:
            # In the operation's own project (a Shared VPC host's, for its firewalls).
            project = _project_in(operation.self_link) or self.project
            return rpc(
                project=project, operation=name, **scope, retry=None, timeout=self.poll_timeout
            )
        except requests.Timeout:
            return None
        except (
            core_exceptions.GoogleAPICallError,
            requests.RequestException,
            RefreshError,
        ) as error:
            cloudcalls.record_error("gce", method)
            failure = _translate(method, error, 1)
            if failure.retryable:
                self._pause(1)
                return None
            raise failure from None
        finally:
            self._guard_token()

    # -- legacy httpHealthChecks: no client in google-cloud-compute -----------------------

    def _session(self) -> AuthorizedSession:
        session: AuthorizedSession | None = getattr(self._local, "session", None)
        if session is None:
            session = AuthorizedSession(self.credentials)  # type: ignore[no-untyped-call]
            session.headers["User-Agent"] = useragent.cloud_user_agent()
            self._local.session = session
        return session

    def rest(
        self,
        method: str,
        http_method: str,
        path: str,
        *,
        body: Any = None,
    ) -> Json:
        """Send ``http_method`` to ``path`` (below the project's URL) as discovery method
        ``method`` over ``AuthorizedSession``: only for what the SDK has no client for (legacy
        ``httpHealthChecks``). Fenced, counted, retried and translated as :meth:`invoke`."""
        url = self.base + path
        attempt = 0
        while True:
            attempt += 1
            cloudcalls.record("gce", method)
            try:
                response = self._session().request(  # type: ignore[no-untyped-call]
                    http_method, url, json=body, timeout=self.timeout
                )
            except (requests.RequestException, RefreshError) as error:
                failure = _translate(method, error, attempt)
            else:
                if response.status_code < 400:
                    self._guard_token()
                    cloudcalls.record_answer("gce", method)
                    answer: Json = response.json() if response.content else {}
                    return answer
                failure = _rest_error(method, response, attempt)
            self._guard_token()
            cloudcalls.record_error("gce", method)
            if failure.retryable and attempt < self.max_attempts:
                log.info("%s; retrying", failure)
                self._pause(attempt)
                continue
            raise failure

    def rest_mutate(self, method: str, http_method: str, path: str, body: Any = None) -> None:
        """A legacy ``httpHealthChecks`` mutation, its operation awaited as any other."""
        answer = self.rest(method, http_method, path, body=body)
        self.finish(compute_v1.Operation.from_json(json.dumps(answer), ignore_unknown_fields=True))

    def concurrently(self, work: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run each callable (mutations, typically) on up to ``concurrency`` threads; each
        answer, or the :class:`CloudError` it raised, in order. Anything else (leadership lost)
        is raised."""
        if len(work) <= 1:
            return [_outcome(item) for item in work]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="gce-op") as pool:
            futures = [pool.submit(_outcome, item) for item in work]
            return [future.result() for future in futures]


def _outcome(work: Callable[[], T]) -> T | Exception:
    try:
        return work()
    except CloudError as error:
        return error


def _last(url: str) -> str:
    """The last segment of a URL or partial path."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def _project_in(link: str) -> str:
    """The project a resource link names (``.../projects/<project>/...``), or ""."""
    parts = link.split("/")
    if "projects" in parts:
        index = parts.index("projects")
        if index + 1 < len(parts):
            return parts[index + 1]
    return ""
