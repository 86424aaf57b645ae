"""The DigitalOcean API, through DigitalOcean's Python SDK (pydo), and the single place where
its answers become polyccm's errors.

Every request goes through :meth:`DigitalOceanApi.call`, which hands it to pydo's client (its
operations keep pydo's names: ``"load_balancers.get"`` is ``client.load_balancers.get``) and
translates the answer:

* 2xx: the body;
* 404: :class:`NotFound` (the caller decides what "gone" means);
* 429: :class:`RateLimited`, a :class:`~polyccm.errors.RetryAfter` until ``ratelimit-reset``,
  so the item comes back when the budget does instead of hammering the API;
* anything else: :class:`DigitalOceanApiError` with DigitalOcean's ``id`` and ``message``.

pydo's pipeline (azure-core) is configured to the provider's budget. Its retry policy
(:class:`BudgetRetryPolicy`) resends a connection failure, a 408 or a 5xx of an idempotent
request (GET, PUT, DELETE) at most :data:`RETRIES` times within :data:`RETRY_WITHIN` seconds,
never a 429 (it waits for ``ratelimit-reset`` as above) and never a POST (a create answered 503
may have been made). Below the retry policy, :class:`BudgetPolicy` runs for every attempt: it
waits for the client-side limiter (or raises :class:`RateLimited` when the wait would block a
worker too long) and passes :func:`polyccm.cloudcalls.record` (counted as
``digitalocean``/``droplets.get``; refused once leadership is lost), so a retry is counted and
fenced like a first attempt. The transport verifies TLS with the CA bundle of the settings
(``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``, as for the emulator), follows no redirect, and
times out well under the lease; the endpoint is ``DO_OVERRIDE_URL`` when set.

The cost: pydo is a generated client for the whole API (a 21 MB operations module), and azure-core
with requests beneath it. Measured in a byte-compiled environment (as the image is: ``python -m
compileall`` of the venv), a process that has started the provider (region checked, droplets
and load balancers listed) holds 74 MiB resident with pydo against 39 MiB with the small urllib3
client it replaced (+35 MiB), and peaks at 90 MiB (+51 MiB: the operations module's byte code is
read whole before it is freed). Most of it is ``import pydo`` itself, so it is
imported only when the first client is built (the first call, the region check at start-up),
never by the plugin, ``polyccm --help`` or ``polyccm check-service``; and one client per
settings is shared by every :class:`DigitalOceanApi` (the controller's and ``polyccm plan``'s).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from polyccm import cloudcalls
from polyccm.errors import CloudError, RetryAfter, Throttled
from polyccm.ratelimit import TokenBucket

from polyccm_digitalocean.config import DigitalOceanConfig

if TYPE_CHECKING:
    from pydo import Client

log = logging.getLogger(__name__)

PROVIDER = "digitalocean"
#: The longest a worker waits for the limiter before handing the item back (RetryAfter).
MAX_LIMITER_WAIT = 5.0
#: Seconds for connecting and for reading an answer: well under the 15 s lease.
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 10
#: Resends of a failed idempotent request, and the seconds all attempts of one call may take.
RETRIES = 2
RETRY_WITHIN = 20
#: Droplets and load balancers per page: the API's maximum.
PAGE_SIZE = 200
#: The pipeline option carrying the call (operation and its api) down to :class:`BudgetPolicy`.
CALL_OPTION = "polyccm_call"

__all__ = [
    "PROVIDER",
    "Answer",
    "DigitalOceanApi",
    "DigitalOceanApiError",
    "NotFound",
    "RateLimited",
    "TokenBucket",
    "make_client",
]


class DigitalOceanApiError(CloudError):
    """DigitalOcean refused or failed a request."""

    def __init__(self, operation: str, status: int, error_id: str, message: str) -> None:
        super().__init__(f"DigitalOcean {operation} failed: HTTP {status} {error_id}: {message}")
        self.operation = operation
        self.status = status
        self.error_id = error_id
        self.message = message


class NotFound(DigitalOceanApiError):
    """HTTP 404: the resource does not exist."""


class RateLimited(RetryAfter):
    """The API's budget (or the client-side limiter's) is spent until ``delay`` from now."""


class ApiThrottled(RateLimited, Throttled):
    """The API itself answered 429: a :class:`~polyccm.errors.Throttled`, so that the service
    controller also reports it as a Warning event (the client-side limiter's waits are not)."""


@dataclass(frozen=True)
class Answer:
    """One answer: its status, decoded JSON body (``None`` when none) and headers."""

    status: int
    body: Any
    headers: Mapping[str, str]


@functools.lru_cache(maxsize=4)
def make_client(config: DigitalOceanConfig) -> Client:
    """pydo's client for ``config`` (built once per settings and shared): imports pydo."""
    from polyccm_digitalocean import pipeline

    return pipeline.build_client(config, CONNECT_TIMEOUT, READ_TIMEOUT, RETRIES, RETRY_WITHIN)


class DigitalOceanApi:
    """The API behind the limiter, the call counter and the error translation."""

    def __init__(
        self,
        config: DigitalOceanConfig,
        *,
        client: Client | None = None,
        limiter: TokenBucket | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._client = client
        self.limiter = limiter or TokenBucket(config.qps, config.burst)
        self._clock = clock
        self._sleep = sleep

    @property
    def client(self) -> Client:
        """pydo's client, built (and pydo imported) at the first call."""
        if self._client is None:
            self._client = make_client(self.config)
        return self._client

    def call(self, operation: str, **params: Any) -> Any:
        """Call ``operation`` (``"load_balancers.get"``) with ``params``; the answer's body."""
        from azure.core.exceptions import AzureError, HttpResponseError

        group, name = operation.split(".", 1)
        method = getattr(getattr(self.client, group), name)
        try:
            answer: Answer = method(**params, cls=_answer, **{CALL_OPTION: (operation, self)})
        except HttpResponseError as error:
            response = error.response
            if response is None:
                raise DigitalOceanApiError(operation, 0, type(error).__name__, str(error)) from None
            headers: Mapping[str, str] = getattr(response, "headers", None) or {}
            answer = Answer(response.status_code or 0, _json(response.text()), headers)
        except AzureError as error:  # connection, TLS, timeout: after the retries
            raise DigitalOceanApiError(operation, 0, type(error).__name__, str(error)) from None
        if answer.status < 400:
            return answer.body
        raise self._error(operation, answer)

    def spend(self, operation: str) -> None:
        """Before each attempt of ``operation`` (retries too): wait for the limiter, or raise
        :class:`RateLimited` when the wait is too long; count it (and refuse it once
        leadership is lost)."""
        wait = self.limiter.reserve()
        if wait > MAX_LIMITER_WAIT:
            self.limiter.give_back()
            raise RateLimited(
                f"DigitalOcean {operation}: client-side rate limit "
                f"({self.config.qps:g} requests/s) reached",
                wait,
            )
        if wait > 0:
            self._sleep(wait)
        cloudcalls.record(PROVIDER, operation)

    def pages(self, operation: str, key: str, **params: Any) -> Iterator[Any]:
        """Every item under ``key`` of every page of a list ``operation``, 200 a page (a page
        is let go before the next is asked for: 200 load balancers of 5,000 droplets are 10 MB
        of JSON)."""
        page = 1
        while True:
            body = self.call(operation, per_page=PAGE_SIZE, page=page, **params)
            items: list[Any] = body.get(key) or []
            more = bool(items) and bool(((body.get("links") or {}).get("pages") or {}).get("next"))
            del body
            yield from items
            del items
            if not more:
                return
            page += 1

    def _error(self, operation: str, answer: Answer) -> DigitalOceanApiError | RateLimited:
        body = answer.body if isinstance(answer.body, dict) else {}
        error_id = str(body.get("id", "")) or f"http_{answer.status}"
        message = str(body.get("message", ""))
        if answer.status == 404:
            return NotFound(operation, answer.status, error_id, message)
        if answer.status == 429:
            delay = self._until_reset(answer.headers)
            log.warning("DigitalOcean rate limit reached; retrying %s in %.0f s", operation, delay)
            return ApiThrottled(
                f"DigitalOcean {operation}: API rate limit reached ({message or error_id}); "
                f"retrying after {delay:.0f} s",
                delay,
            )
        return DigitalOceanApiError(operation, answer.status, error_id, message)

    def _until_reset(self, headers: Mapping[str, str]) -> float:
        lowered = {k.lower(): v for k, v in headers.items()}
        try:
            reset = float(lowered.get("ratelimit-reset", ""))
        except ValueError:
            return 60.0
        return max(1.0, reset - self._clock())


def _answer(pipeline_response: Any, body: Any, headers: Any) -> Answer:
    """pydo's ``cls`` hook: the status beside the body (pydo returns a documented 404's body
    as an answer, not an error)."""
    del headers  # pydo's parsed copy: the raw ones carry every header
    response = pipeline_response.http_response
    return Answer(response.status_code, body, response.headers)


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None
