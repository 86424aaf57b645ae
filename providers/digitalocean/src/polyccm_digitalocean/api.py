"""The DigitalOcean API client, and the single place where its answers become polyccm's errors.

Every request goes through :meth:`DigitalOceanApi.call`, which, in this order, waits for the
client-side limiter (or raises :class:`RateLimited` when the wait would block a worker too
long), passes :func:`polyccm.cloudcalls.record` (counted as ``digitalocean``/``droplets.get``;
refused once leadership is lost), sends exactly one request (never retried here: a 429 must
not be resent at once), and translates the answer:

* 2xx: the body;
* 404: :class:`NotFound` (the caller decides what "gone" means);
* 429: :class:`RateLimited`, a :class:`~polyccm.errors.RetryAfter` until ``ratelimit-reset``,
  so the item comes back when the budget does instead of hammering the API;
* anything else: :class:`DigitalOceanApiError` with DigitalOcean's ``id`` and ``message``.

Requests are plain JSON over one urllib3 pool (:class:`RestClient`); operations keep the names of
DigitalOcean's Python SDK (pydo), whose generated client cost polyccm about 200 MiB of memory
for the eleven operations used. TLS is always verified (``REQUESTS_CA_BUNDLE`` names a private
CA, as for the emulator), redirects are not followed, and the token travels only over https.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from polyccm import cloudcalls
from polyccm.errors import CloudError, RetryAfter
from polyccm.ratelimit import TokenBucket

from polyccm_digitalocean.config import DigitalOceanConfig

log = logging.getLogger(__name__)

PROVIDER = "digitalocean"
#: The longest a worker waits for the limiter before handing the item back (RetryAfter).
MAX_LIMITER_WAIT = 5.0
#: Seconds for connecting and for reading an answer: well under the 15 s lease.
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 10
#: Droplets and load balancers per page: the API's maximum.
PAGE_SIZE = 200


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


@dataclass(frozen=True)
class Answer:
    """One answer: its status, decoded JSON body (``None`` when none) and headers."""

    status: int
    body: Any
    headers: Mapping[str, str]


#: Each operation (pydo's names): method and path, ``{name}`` filled from the call's params.
OPERATIONS: Mapping[str, tuple[str, str]] = {
    "droplets.get": ("GET", "/v2/droplets/{droplet_id}"),
    "droplets.list": ("GET", "/v2/droplets"),
    "load_balancers.get": ("GET", "/v2/load_balancers/{lb_id}"),
    "load_balancers.list": ("GET", "/v2/load_balancers"),
    "load_balancers.create": ("POST", "/v2/load_balancers"),
    "load_balancers.update": ("PUT", "/v2/load_balancers/{lb_id}"),
    "load_balancers.delete": ("DELETE", "/v2/load_balancers/{lb_id}"),
    "load_balancers.add_droplets": ("POST", "/v2/load_balancers/{lb_id}/droplets"),
    "load_balancers.remove_droplets": ("DELETE", "/v2/load_balancers/{lb_id}/droplets"),
    "certificates.list": ("GET", "/v2/certificates"),
    "regions.list": ("GET", "/v2/regions"),
}
#: Variables naming the CA bundle to verify the API with (requests' names, which pydo used).
CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


class RestClient:
    """JSON requests to the API at ``config.api_url`` with the bearer token: one urllib3 pool,
    verified TLS, no redirects, no retries, bounded timeouts."""

    def __init__(self, config: DigitalOceanConfig) -> None:
        self._base = config.api_url.rstrip("/")
        self._token = config.token
        ca_bundle = next((os.environ[v] for v in CA_BUNDLE_VARIABLES if os.environ.get(v)), None)
        self._pool = urllib3.PoolManager(
            maxsize=8,
            retries=False,
            cert_reqs="CERT_REQUIRED",
            ca_certs=ca_bundle,
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=READ_TIMEOUT),
        )

    def send(self, operation: str, **params: Any) -> Answer:
        """One request for ``operation``: path parameters by name, ``body`` as JSON, the rest
        as the query. urllib3's errors (connection, TLS, timeout) are raised as they are."""
        method, template = OPERATIONS[operation]
        body = params.pop("body", None)
        path = template.format(**{k: quote(str(params.pop(k)), safe="") for k in _fields(template)})
        query = {k: v for k, v in params.items() if v is not None}
        url = self._base + path + (f"?{urlencode(query)}" if query else "")
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/json",
            "User-Agent": "polyccm",
        }
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        response = self._pool.request(
            method, url, body=payload, headers=headers, redirect=False, preload_content=True
        )
        data: Any = None
        if response.data:
            try:
                data = json.loads(response.data)
            except ValueError:
                data = None
        return Answer(response.status, data, dict(response.headers))


def _fields(template: str) -> list[str]:
    return [part.split("}", 1)[0] for part in template.split("{")[1:]]


def make_client(config: DigitalOceanConfig) -> RestClient:
    """The client every :class:`DigitalOceanApi` of ``config`` sends through."""
    return RestClient(config)


class DigitalOceanApi:
    """The API behind the limiter, the call counter and the error translation."""

    def __init__(
        self,
        config: DigitalOceanConfig,
        *,
        client: RestClient | None = None,
        limiter: TokenBucket | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.client = client if client is not None else make_client(config)
        self.limiter = limiter or TokenBucket(config.qps, config.burst)
        self._clock = clock
        self._sleep = sleep

    def call(self, operation: str, **params: Any) -> Any:
        """Call ``operation`` (``"load_balancers.get"``) with ``params``; the answer's body."""
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
        try:
            answer = self.client.send(operation, **params)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            cloudcalls.record_error(PROVIDER, operation)
            raise DigitalOceanApiError(operation, 0, type(error).__name__, str(error)) from None
        if answer.status < 400:
            return answer.body
        cloudcalls.record_error(PROVIDER, operation)
        raise self._error(operation, answer)

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
            return RateLimited(
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
