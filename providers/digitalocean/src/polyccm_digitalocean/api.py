"""The pydo client, and the single place where DigitalOcean's answers become polyccm's errors.

Every request goes through :meth:`DigitalOceanApi.call`, which, in this order, waits for the
client-side limiter (or raises :class:`RateLimited` when the wait would block a worker too
long), passes :func:`polyccm.cloudcalls.record` (counted as ``digitalocean``/``droplets.get``;
refused once leadership is lost), sends exactly one request (azure-core's own retries are off:
they would resend a 429 at once), and translates the answer:

* 2xx: the body;
* 404: :class:`NotFound` (pydo returns, rather than raises, the 404 body of some operations;
  the caller decides what "gone" means);
* 429: :class:`RateLimited`, a :class:`~polyccm.errors.RetryAfter` until ``ratelimit-reset``,
  so the item comes back when the budget does instead of hammering the API;
* anything else: :class:`DigitalOceanApiError` with DigitalOcean's ``id`` and ``message``.

TLS is always verified (``REQUESTS_CA_BUNDLE`` names a private CA, as for the emulator) and the
token travels only over https.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

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
class _Answer:
    status: int
    body: Any
    headers: Mapping[str, str]


def _capture(pipeline_response: Any, body: Any, headers: Any) -> _Answer:
    """pydo's ``cls`` hook: keep the status next to the body (404 bodies come back as data)."""
    response = pipeline_response.http_response
    return _Answer(response.status_code, body, dict(response.headers))


def make_client(config: DigitalOceanConfig) -> Any:
    """A pydo client for ``config``: no SDK retries, no redirects, bounded timeouts."""
    import pydo

    return pydo.Client(
        config.token,
        endpoint=config.api_url,
        retry_total=0,
        permit_redirects=False,
        connection_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        user_agent="polyccm",
    )


class DigitalOceanApi:
    """pydo behind the limiter, the call counter and the error translation."""

    def __init__(
        self,
        config: DigitalOceanConfig,
        *,
        client: Any = None,
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
        from azure.core.exceptions import AzureError, HttpResponseError

        group, method = operation.split(".")
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
            answer = getattr(getattr(self.client, group), method)(cls=_capture, **params)
        except HttpResponseError as error:
            response = error.response
            status = int(error.status_code or 0)
            body = _json_body(response)
            headers = dict(getattr(response, "headers", None) or {})
            answer = _Answer(status, body, headers)
        except AzureError as error:
            cloudcalls.record_error(PROVIDER, operation)
            raise DigitalOceanApiError(operation, 0, type(error).__name__, str(error)) from None
        if answer.status < 400:
            return answer.body
        cloudcalls.record_error(PROVIDER, operation)
        raise self._error(operation, answer)

    def pages(self, operation: str, key: str, **params: Any) -> Iterator[Any]:
        """Every item under ``key`` of every page of a list ``operation``, 200 a page."""
        page = 1
        while True:
            body = self.call(operation, per_page=PAGE_SIZE, page=page, **params)
            items = body.get(key) or []
            yield from items
            pages = (body.get("links") or {}).get("pages") or {}
            if not pages.get("next") or not items:
                return
            page += 1

    def _error(self, operation: str, answer: _Answer) -> DigitalOceanApiError | RateLimited:
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


def _json_body(response: Any) -> Any:
    if response is None:
        return None
    try:
        return response.json()
    except ValueError:
        return None
