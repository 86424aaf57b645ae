"""The compute v1 REST API of one project, and the single place where its errors become
polyccm errors.

Requests go through google-auth's ``AuthorizedSession`` (the HTTP transport google-cloud-compute
itself uses over REST) to ``api-endpoint`` from gce.conf, or Google's. One client reaches every
method the provider needs, including the two google-cloud-compute gets wrong against a custom
endpoint: operation polling (its ExtendedOperation builds polling clients with default options)
and legacy ``httpHealthChecks`` (it has no client for them). Operations are awaited with
``operations.wait`` on the operation's own scope, built on the same endpoint.

Every request sent, retries and operation polls included, first passes
:func:`polyccm.cloudcalls.record` under its discovery method id (``compute.routes.insert``): it
is counted, and refused once this process has lost leadership. Rate-limit answers (403
``rateLimitExceeded``/``userRateLimitExceeded``, 429) and 5xx are retried with jittered
exponential backoff; what still fails is raised as :class:`GceApiError`, whose message names
the method, status and reason, so a controller logs it, reports it as an event and re-queues
the item. A resource quota (403 ``quotaExceeded``, or an operation ending ``QUOTA_EXCEEDED``) is
not retried here: it does not lift in seconds, so the controller's backoff retries it. The
access token is registered with the log redaction as soon as google-auth obtains it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import requests
from google.auth.transport.requests import AuthorizedSession
from polyccm import cloudcalls, logredact
from polyccm.errors import CloudError

log = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")

#: The scope the provider asks application-default credentials for.
SCOPES = ("https://www.googleapis.com/auth/compute",)
RATE_LIMIT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded"})
QUOTA_REASONS = frozenset({"quotaExceeded", "QUOTA_EXCEEDED"})


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
    def already_exists(self) -> bool:
        return self.status == 409 or self.reason == "RESOURCE_ALREADY_EXISTS"

    @property
    def retryable(self) -> bool:
        return self.status in (429, 500, 502, 503, 504) or (
            self.status == 403 and self.reason in RATE_LIMIT_REASONS
        )


class OperationFailed(GceApiError):
    """A mutation was accepted but its operation ended DONE with ``error``."""


def _error_of(method: str, response: requests.Response, attempts: int) -> GceApiError:
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    reasons = [item.get("reason", "") for item in error.get("errors", ()) if isinstance(item, dict)]
    message = str(error.get("message") or response.reason or "")
    reason = reasons[0] if reasons else ""
    return GceApiError(method, response.status_code, reason, message, attempts)


class GceApi:
    """One project's compute API (``endpoint`` is the v1 base URL ending in ``/``).

    Thread-safe: one ``requests`` session per thread. ``max_attempts`` bounds the retries of
    one call; ``backoff`` is the first pause (doubled each time, jittered, at most 4 s).
    Operation waits are cut every ``poll_timeout`` seconds and asked again (each poll passes
    the leadership fence) until ``operation_timeout``.
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
        self.credentials = credentials
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout = timeout
        self.concurrency = concurrency
        self.poll_timeout = poll_timeout
        self.operation_timeout = operation_timeout
        self._sleep = sleep
        self._local = threading.local()
        self._known_token: str | None = None

    @property
    def base(self) -> str:
        """The URL of the project: ``{endpoint}projects/{project}/``."""
        return f"{self.endpoint}projects/{self.project}/"

    def _session(self) -> AuthorizedSession:
        session: AuthorizedSession | None = getattr(self._local, "session", None)
        if session is None:
            session = AuthorizedSession(self.credentials)  # type: ignore[no-untyped-call]
            self._local.session = session
        return session

    def _guard_token(self) -> None:
        token = getattr(self.credentials, "token", None)
        if token and token != self._known_token:
            logredact.add_secret(token)
            self._known_token = token

    def call(
        self,
        method: str,
        http_method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Json:
        """Send ``http_method`` to ``path`` (below the project's URL) as discovery method
        ``method``; the decoded answer. Retries what is retryable, raises :class:`GceApiError`."""
        url = path if path.startswith(("http://", "https://")) else self.base + path
        attempt = 0
        while True:
            attempt += 1
            cloudcalls.record("gce", method)
            try:
                response = self._session().request(  # type: ignore[no-untyped-call]
                    http_method, url, json=body, params=params, timeout=self.timeout
                )
            except requests.RequestException as error:
                self._guard_token()
                cloudcalls.record_error("gce", method)
                failure = GceApiError(method, 0, type(error).__name__, str(error), attempt)
                if attempt < self.max_attempts:
                    self._pause(attempt)
                    continue
                raise failure from None
            self._guard_token()
            if response.status_code < 400:
                answer: Json = response.json() if response.content else {}
                return answer
            cloudcalls.record_error("gce", method)
            failure = _error_of(method, response, attempt)
            if failure.retryable and attempt < self.max_attempts:
                log.info("%s; retrying", failure)
                self._pause(attempt)
                continue
            raise failure

    def _pause(self, attempt: int) -> None:
        delay = min(4.0, self.backoff * 2 ** (attempt - 1))
        self._sleep(delay * random.uniform(0.5, 1.0))

    def get(self, method: str, path: str, **params: Any) -> Json:
        return self.call(method, "GET", path, params=params or None)

    def pages(self, method: str, path: str, *, filter: str = "", **params: Any) -> Iterator[Json]:
        """Each page of a list (``maxResults`` 500, following ``nextPageToken``)."""
        query: dict[str, Any] = {"maxResults": 500, **params}
        if filter:
            query["filter"] = filter
        while True:
            page = self.call(method, "GET", path, params=query)
            yield page
            token = page.get("nextPageToken")
            if not token:
                return
            query["pageToken"] = token

    def list_all(self, method: str, path: str, *, filter: str = "") -> list[Json]:
        """Every item of a list."""
        pages = self.pages(method, path, filter=filter)
        return [item for page in pages for item in page.get("items", ())]

    def aggregated(self, method: str, path: str, *, filter: str = "", key: str) -> list[Json]:
        """Every item of an aggregatedList (``key`` names the items: ``instances``), all scopes."""
        found: list[Json] = []
        for page in self.pages(method, path, filter=filter):
            for scoped in page.get("items", {}).values():
                found.extend(scoped.get(key, ()))
        return found

    def wait(self, operation: Json) -> Json:
        """Wait for ``operation`` to be DONE (``operations.wait`` on its scope, repeated while
        GCE returns it unfinished); :class:`OperationFailed` when it ended with an error."""
        name = operation["name"]
        if operation.get("zone"):
            scope, method = f"zones/{_last(operation['zone'])}", "compute.zoneOperations.wait"
        elif operation.get("region"):
            scope, method = f"regions/{_last(operation['region'])}", "compute.regionOperations.wait"
        else:
            scope, method = "global", "compute.globalOperations.wait"
        deadline = time.monotonic() + self.operation_timeout
        while operation.get("status") != "DONE":
            if time.monotonic() > deadline:
                raise GceApiError(method, 0, "timeout", f"operation {name} not done in time")
            operation = self._poll(method, f"{scope}/operations/{name}/wait") or operation
        error = operation.get("error")
        if error:
            details = error.get("errors") or [{}]
            code = str(details[0].get("code", ""))
            message = str(details[0].get("message", "")) or str(operation.get("httpErrorMessage"))
            status = int(operation.get("httpErrorStatusCode") or 400)
            what = operation.get("operationType", "operation")
            raise OperationFailed(
                f"{what} {_last(operation.get('targetLink', ''))}",
                status,
                code,
                message,
            )
        return operation

    def _poll(self, method: str, path: str) -> Json | None:
        """One ``operations.wait``, cut at ``poll_timeout`` (GCE holds it up to two minutes):
        ``None`` when it was cut, so the caller asks again. Each poll passes the fence, so a
        lost term stops waiting within ``poll_timeout``."""
        cloudcalls.record("gce", method)
        try:
            response = self._session().request(  # type: ignore[no-untyped-call]
                "POST", self.base + path, timeout=(self.timeout, self.poll_timeout)
            )
        except requests.Timeout:
            return None
        except requests.RequestException as error:
            cloudcalls.record_error("gce", method)
            raise GceApiError(method, 0, type(error).__name__, str(error)) from None
        finally:
            self._guard_token()
        if response.status_code >= 400:
            cloudcalls.record_error("gce", method)
            failure = _error_of(method, response, 1)
            if failure.retryable:
                self._pause(1)
                return None
            raise failure
        answer: Json = response.json()
        return answer

    def mutate(
        self, method: str, http_method: str, path: str, body: Any = None, **params: Any
    ) -> Json:
        """A mutation, awaited; :class:`GceApiError` or :class:`OperationFailed`."""
        return self.wait(self.call(method, http_method, path, body=body, params=params or None))

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
