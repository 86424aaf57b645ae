"""A JSON client for the Kubernetes API over the ``kubernetes`` package's REST layer,
rate-limited like client-go.

The controllers read and write plain JSON dictionaries rather than the generated client models:
parsing a node into a dict is several times faster and lighter than building ``V1Node`` objects,
which matters at thousands of nodes. So requests go through the package's
``kubernetes.client.rest.RESTClientObject`` (its urllib3 pool, TLS and proxy settings, from the
``kubernetes.client.Configuration`` that :mod:`polyccm.kube.config` loads) and the answer is
read as raw JSON, never through ``ApiClient``'s model deserialisation; a token-bucket limiter
paces them (``--kube-api-qps`` / ``--kube-api-burst``).

Each request sends the credential current when it starts (:mod:`polyccm.kube.credentials`).
An answer ``401 Unauthorized`` has the credential fetched again and the request sent once more
with the new one (client-go's exec authenticator does the same); a caller with its own deadline
(:data:`NO_RETRIES`: the Lease renewals) does not wait for that and sends its next attempt with
whatever is current then. A new client certificate (from an exec plugin) gets a new connection
pool, so new connections present it.

Requests are retried as client-go retries them (see :class:`RetryPolicy`), so that an API server
that restarts or sheds load costs a short wait rather than an error:

* an answer ``429 Too Many Requests``, or any 5xx carrying ``Retry-After``, is retried after the
  seconds the server asked for (capped), whatever the verb: the server refused the request;
* a connection that could not be opened (refused, connect timeout) is retried with backoff for
  every verb, since nothing was sent;
* a connection that broke after the request went out (reset, closed, a protocol error while the
  server restarts) is retried only for GET: a write may have reached the server, and sending it
  again blindly could apply it twice. The caller's own retry (a work queue's backoff, a
  resourceVersion-guarded write) decides instead.

Connection errors are retried for a few seconds only (``connection_budget``), with one warning
per request: a longer outage reaches the caller, which logs it and backs off on its own.

Read timeouts are never retried (the server is slow, not gone), and watches are never retried
here (but after a 401, as above): informers reconnect with their own backoff.
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3

from polyccm import metrics

# Re-exported (explicitly, for mypy): callers load their connection settings from here.
from polyccm.kube.config import Configuration as Configuration  # noqa: PLC0414
from polyccm.kube.config import KubeconfigError as KubeconfigError  # noqa: PLC0414
from polyccm.kube.config import load_configuration as load_configuration  # noqa: PLC0414
from polyccm.kube.credentials import Credential
from polyccm.ratelimit import TokenBucket

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Resource:
    """Where a kind of object lives in the API."""

    group_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        prefix = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        parts = [prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name:
            parts.append(quote(name, safe=""))
        return "/".join(parts)


NODES = Resource("v1", "nodes", namespaced=False)
SERVICES = Resource("v1", "services", namespaced=True)
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
EVENTS = Resource("v1", "events", namespaced=True)
LEASES = Resource("coordination.k8s.io/v1", "leases", namespaced=True)
SECRETS = Resource("v1", "secrets", namespaced=True)
CONFIGMAPS = Resource("v1", "configmaps", namespaced=True)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a request is sent again (client-go's rules, module docstring)."""

    max_retries: int = 10
    """Retries after the first attempt (client-go's default is 10)."""
    max_retry_after: float = 10.0
    """Longest wait honoured from one ``Retry-After``; longer asks wait this long."""
    default_retry_after: float = 1.0
    """Wait after a 429 that names no delay."""
    initial_backoff: float = 0.2
    """First wait after a connection error; it doubles up to :attr:`max_backoff`."""
    max_backoff: float = 1.6
    connection_budget: float = 3.0
    """Seconds since the request began after which a connection error is no longer retried.
    Enough for a blip or a quick restart; a longer outage reaches the caller, whose own backoff
    (an informer's, a work queue's) takes over and whose log says so."""
    max_elapsed: float = 30.0
    """Seconds since the request began after which no ``Retry-After`` is waited for."""
    await_credentials: bool = True
    """Whether a request whose credential expired or was refused (401) waits for the next
    one; otherwise it goes with what there is and the next request gets the new one."""


NO_RETRIES = RetryPolicy(max_retries=0, await_credentials=False)
"""For callers that keep their own deadline (a lease renewal) and retry themselves: nothing
is sent again, and no request waits for a credential being fetched."""

IDEMPOTENT_METHODS = frozenset({"GET"})
"""Methods sent again after a connection broke mid-request (client-go retries GET only)."""


def _nothing_sent(error: urllib3.exceptions.HTTPError) -> bool:
    """Whether the request failed before a byte of it reached the server."""
    return isinstance(error, urllib3.exceptions.ConnectTimeoutError)  # NewConnectionError too


def _connection_broke(error: urllib3.exceptions.HTTPError) -> bool:
    """Whether the connection failed in a way a restarting server causes: reset, closed, cut
    short, or a TLS session ended mid-way (not a certificate that fails to verify)."""
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return True
    if isinstance(error, urllib3.exceptions.SSLError):
        cause = error.args[0] if error.args else None
        return isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError))
    return False


def _retry_after(response: urllib3.BaseHTTPResponse, policy: RetryPolicy) -> float | None:
    """The wait a 429, or a 5xx with ``Retry-After``, asks for; ``None`` when it asks none."""
    status = response.status
    if status != 429 and not 500 <= status < 600:
        return None
    header = response.headers.get("Retry-After")
    seconds: float | None = None
    if header is not None:
        try:
            seconds = float(int(header.strip()))  # client-go reads whole seconds only
        except ValueError:
            seconds = None
    if seconds is None:
        if status != 429:
            return None
        seconds = policy.default_retry_after
    return min(max(0.0, seconds), policy.max_retry_after)


class WatchHandle:
    """An open watch that another thread may end with :meth:`shutdown`."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self.cancelled = False

    def shutdown(self) -> None:
        """End the watch now: the reading thread's iterator stops without an error."""
        self.cancelled = True
        # Already released or closed: nothing is left to interrupt.
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            self._response.shutdown()

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._response.stream(64 * 1024)
        except (urllib3.exceptions.HTTPError, OSError):
            if not self.cancelled:
                raise


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


class KubeApi:
    """JSON requests against one API server. Thread-safe."""

    def __init__(
        self,
        configuration: Configuration,
        *,
        qps: float = 20.0,
        burst: int = 30,
        user_agent: str = "polyccm",
        retry: RetryPolicy | None = None,
    ) -> None:
        self.configuration = configuration
        self.limiter = TokenBucket(qps, burst)
        self.user_agent = user_agent
        self.retry = retry if retry is not None else RetryPolicy()
        self._client_lock = threading.Lock()
        self._client: Any = None
        self._client_certificate: tuple[str | None, str | None] | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, **kwargs: Any) -> KubeApi:
        return cls(load_configuration(kubeconfig), **kwargs)

    # -- plumbing -------------------------------------------------------------------------

    def _rest(self) -> Any:
        """The package's REST client for the newest credential: one pool while its client
        certificate stays the same, a new one (the old one closed) once it changes. A request
        begun with an older credential goes through it too (a newer certificate authenticates
        as well as the old one)."""
        newest = self.configuration.credentials.now
        certificate = (newest.cert_file, newest.key_file)
        with self._client_lock:
            if self._client is None or self._client_certificate != certificate:
                previous = self._client
                self._client = self.configuration.rest_client(newest)
                self._client_certificate = certificate
                if previous is not None:
                    previous.close()  # idle connections go; requests under way finish
            return self._client

    def _headers(self, content_type: str | None, credential: Credential) -> urllib3.HTTPHeaderDict:
        headers = urllib3.HTTPHeaderDict(
            {"Accept": "application/json", "User-Agent": self.user_agent}
        )
        if content_type:
            headers["Content-Type"] = content_type
        if credential.authorization:
            headers["Authorization"] = credential.authorization
        for name, value in self.configuration.impersonation:
            headers.add(name, value)  # a group or an extra's value per header, as client-go
        return headers

    def _url(self, path: str, query: Mapping[str, Any] | None) -> str:
        url = self.configuration.host.rstrip("/") + path
        if query:
            pairs = {
                k: str(v).lower() if isinstance(v, bool) else v
                for k, v in query.items()
                if v is not None
            }
            if pairs:
                url += "?" + urlencode(pairs)
        return url

    def _send(
        self,
        method: str,
        url: str,
        *,
        body: Any,
        content_type: str | None,
        timeout: tuple[float, float],
    ) -> Any:
        """One request through the package's REST client, sent once more with a new credential
        after a 401 (:class:`RetryPolicy.await_credentials` permitting); its answer, body unread.
        Connection errors are urllib3's (the REST client's wrapping of TLS errors undone)."""
        wait = self.retry.await_credentials
        credentials = self.configuration.credentials
        credential = credentials.current(wait=wait)
        sent_again = False
        while True:
            started = time.monotonic()
            try:
                response = self._rest().request(
                    method,
                    url,
                    headers=self._headers(content_type, credential),
                    body=body,
                    _request_timeout=timeout,
                )
            except urllib3.exceptions.HTTPError:
                _count_request(method, url, None, started)
                raise
            except Exception as error:
                _count_request(method, url, None, started)
                # The package's ApiException(status=0) around a urllib3 SSLError.
                cause = error.__context__
                if isinstance(cause, urllib3.exceptions.HTTPError) and not getattr(
                    error, "status", None
                ):
                    raise cause from None
                raise
            _count_request(method, url, response.status, started)
            if response.status != 401 or sent_again:
                return response
            fresh = credentials.refused(credential, wait=wait)
            if fresh is None:
                return response
            _discard(response)
            credential, sent_again = fresh, True

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float = 30.0,
        decode: bool = True,
    ) -> JsonObject:
        """One request; returns the decoded JSON answer or raises :class:`ApiError` (or the
        urllib3 error of the last attempt), retried as the module docstring says. With
        ``decode`` false a successful answer is read but not decoded (``{}`` is returned): for
        writes whose caller never reads the object the server sends back (a node is a few
        kilobytes of JSON, and a CCM writes thousands)."""
        if body is not None and content_type is None:
            content_type = "application/json"
        url = self._url(path, query)
        policy = self.retry
        backoff = policy.initial_backoff
        began = time.monotonic()
        attempt = 0
        while True:
            self.limiter.acquire()  # every attempt is a request, as in client-go
            try:
                response = self._send(
                    method,
                    url,
                    body=body,
                    content_type=content_type,
                    timeout=(min(10.0, timeout), timeout),
                )
            except urllib3.exceptions.HTTPError as error:
                retryable = _nothing_sent(error) or (
                    method in IDEMPOTENT_METHODS and _connection_broke(error)
                )
                delay = backoff
                elapsed = time.monotonic() - began
                if (
                    not retryable
                    or attempt >= policy.max_retries
                    or elapsed + delay > policy.connection_budget
                ):
                    raise
                backoff = min(policy.max_backoff, backoff * 2)
                # Said once per request: a restart is visible in the log without a flood.
                (log.warning if attempt == 0 else log.debug)(
                    "%s %s: %s; retrying in %.1fs", method, path, error, delay
                )
            else:
                data = _body(response)
                if response.status < 400:
                    return json.loads(data) if data and decode else {}
                wait = _retry_after(response.response, policy)
                elapsed = time.monotonic() - began
                if (
                    wait is None
                    or attempt >= policy.max_retries
                    or elapsed + wait > policy.max_elapsed
                ):
                    raise _api_error(response.status, data)
                delay = wait
                log.debug(
                    "%s %s: HTTP %d, the server asks to retry in %.0fs",
                    method,
                    path,
                    response.status,
                    delay,
                )
            time.sleep(delay)
            attempt += 1

    # -- verbs ----------------------------------------------------------------------------

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObject:
        return self.request("GET", resource.path(namespace, name))

    def list(self, resource: Resource, namespace: str | None = None, **query: Any) -> JsonObject:
        return self.request("GET", resource.path(namespace), query=query, timeout=120.0)

    def create(
        self,
        resource: Resource,
        body: JsonObject,
        namespace: str | None = None,
        *,
        decode: bool = True,
    ) -> JsonObject:
        """Create ``body``: the object as created (``{}`` without ``decode``)."""
        return self.request("POST", resource.path(namespace), body=body, decode=decode)

    def replace(
        self,
        resource: Resource,
        name: str,
        body: JsonObject,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JsonObject:
        path = resource.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return self.request("PUT", path, body=body)

    def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: str = STRATEGIC_MERGE_PATCH,
        decode: bool = True,
    ) -> JsonObject:
        """Patch ``name``: the object as patched (``{}`` without ``decode``)."""
        path = resource.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return self.request("PATCH", path, body=body, content_type=patch_type, decode=decode)

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        body: JsonObject | None = None,
        **query: Any,
    ) -> JsonObject:
        """Delete ``name``; ``body`` is a ``DeleteOptions`` (``preconditions``,
        ``propagationPolicy``...)."""
        return self.request("DELETE", resource.path(namespace, name), query=query, body=body)

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        on_open: Callable[[WatchHandle], None] | None = None,
        **query: Any,
    ) -> Iterator[JsonObject]:
        """Stream watch events (``{"type": ..., "object": {...}}``) until the server ends the
        watch. Bookmarks are requested; a 410 Gone raises :class:`ApiError` with status 410.

        ``on_open`` receives the open response; calling its ``shutdown()`` from another thread
        ends the watch at once (the iterator then stops), which is how informers stop."""
        self.limiter.acquire()
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            **query,
        }
        response = self._send(
            "GET",
            self._url(resource.path(namespace), params),
            body=None,
            content_type=None,
            timeout=(10.0, timeout_seconds + 30),
        ).response
        handle = WatchHandle(response)
        if on_open is not None:
            on_open(handle)
        try:
            if response.status >= 400:
                raise _api_error(response.status, response.read())
            buffer = b""
            for chunk in handle.chunks():
                # Every whole line of the chunk at once; the unfinished one waits for the next.
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object", {})
                        raise ApiError(
                            int(status.get("code") or 500),
                            str(status.get("reason") or "Error"),
                            str(status.get("message") or ""),
                        )
                    yield event
        finally:
            response.release_conn()

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()


def _count_request(method: str, url: str, status: int | None, started: float) -> None:
    """One request to the API server in client-go's metrics (``rest_client_requests_total``
    by code, method and host; ``rest_client_request_duration_seconds`` by verb and host, to
    the answer's headers as client-go times it); ``code`` ``<error>`` when no answer came."""
    host = urlsplit(url).netloc
    code = "<error>" if status is None else str(status)
    metrics.rest_client_requests_total.labels(code=code, method=method, host=host).inc()
    metrics.rest_client_request_duration_seconds.labels(verb=method, host=host).observe(
        time.monotonic() - started
    )


def _body(response: Any) -> bytes:
    """The whole body of the REST client's answer; its connection goes back to the pool."""
    try:
        return bytes(response.read())
    finally:
        response.response.release_conn()


def _discard(response: Any) -> None:
    """Read and drop an answer that will not be used, so its connection can be reused."""
    with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
        _body(response)


def _api_error(status: int, data: bytes) -> ApiError:
    try:
        body = json.loads(data)
        return ApiError(status, str(body.get("reason") or ""), str(body.get("message") or ""))
    except (ValueError, AttributeError):
        return ApiError(status, "", data[:200].decode(errors="replace"))
