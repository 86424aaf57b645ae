"""The ``metalv1`` client, and the single place where Metal's answers become polyccm's errors.

Every request goes through :meth:`MetalClient.call`, which, in this order, waits for the
client-side limiter (or raises :class:`RateLimited` when the wait would block a worker too
long; :meth:`MetalClient.spare_call`, for background bookkeeping such as BGP sessions, keeps to
a pace of its own and waits while node or load-balancer work is using the limiter, so such a
burst is never queued behind it), passes :func:`polyccm.cloudcalls.record` (counted as
``packet``/``find_device_by_id``; refused once leadership is lost), sends exactly one request
through ``metalv1`` (urllib3's own retries are off: they would resend a 429 out of the record's
sight), and translates the answer:

* 2xx: the JSON body as plain dicts (the SDK's ``*_without_preload_content`` variants: its
  serialisation, paths and auth, without its pydantic models, which refuse fields a
  Metal-compatible API may add);
* 404: :class:`NotFound` (the caller decides what "gone" means);
* 429: :class:`RateLimited`, a :class:`~polyccm.errors.RetryAfter` until ``X-RateLimit-Reset``;
* anything else: :class:`MetalApiError` with Metal's ``errors``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from polyccm import cloudcalls, logredact, useragent
from polyccm.errors import CloudError, RetryAfter, Throttled
from polyccm.ratelimit import TokenBucket

from polyccm_packet import sdk
from polyccm_packet.config import MetalConfig

log = logging.getLogger(__name__)

PROVIDER = "packet"
MAX_LIMITER_WAIT = 5.0
#: Seconds a background call waits for spare tokens before it gives up (and is retried).
MAX_SPARE_WAIT = 120.0
#: Background calls' own pace (requests a second) and burst. Metal publishes no request rate
#: (it answers 429 with ``X-RateLimit-Reset``, which :class:`RateLimited` honours) and upstream's
#: CCM sends the same BGP requests with no pacing at all; this cap bounds a burst's background
#: work (2 requests per new node: 2,000 for 1,000 nodes take 10 s) without starving anyone.
BACKGROUND_QPS = 200.0
BACKGROUND_BURST = 40
#: Seconds for connecting and for reading an answer: well under the 15 s lease.
TIMEOUT = (5.0, 10.0)
#: Devices and reservations per page (Metal allows 1000; 100 keeps each answer small).
PAGE_SIZE = 100

_API_CLASSES = {
    "devices": "DevicesApi",
    "ips": "IPAddressesApi",
    "bgp": "BGPApi",
    "metros": "MetrosApi",
    "projects": "ProjectsApi",
}


class MetalApiError(CloudError):
    """Metal refused or failed a request."""

    def __init__(self, operation: str, status: int, errors: list[str]) -> None:
        detail = "; ".join(errors) or "no detail"
        super().__init__(f"Metal {operation} failed: HTTP {status}: {detail}")
        self.operation = operation
        self.status = status
        self.errors = errors


class NotFound(MetalApiError):
    """HTTP 404: the resource does not exist."""


class RateLimited(RetryAfter):
    """The API's budget (or the client-side limiter's) is spent until ``delay`` from now."""


class ApiThrottled(RateLimited, Throttled):
    """The API itself answered 429: a :class:`~polyccm.errors.Throttled`, so that the service
    controller also reports it as a Warning event (the client-side limiter's waits are not)."""


def make_client(config: MetalConfig) -> Any:
    """A ``metalv1`` API client for ``config``: its base URL, its key, no urllib3 retries."""
    import urllib3

    metalv1 = sdk.metalv1()

    configuration = metalv1.Configuration(host=config.api_url)
    configuration.api_key["x_auth_token"] = config.api_key
    configuration.retries = urllib3.Retry(
        total=0, redirect=False, respect_retry_after_header=False, raise_on_status=False
    )
    client = metalv1.ApiClient(configuration)
    # As upstream names itself (cloud-provider-equinix-metal metal/cloud.go:64 @38d15e2), and
    # which process calls (polyccm.useragent).
    client.user_agent = useragent.cloud_user_agent()
    return client


def _log_exchange(
    method: str, request: Mapping[Any, Any], status: int, body: Any, raw: Any
) -> None:
    """``PACKNGO_DEBUG``'s wire log, as upstream's SDK prints it with ``Debug`` on, but through
    the log's handlers: their :class:`~polyccm.logredact.RedactingFilter` masks the API key. The
    SDK's own ``debug`` is not used: it turns on ``http.client``'s ``print`` of every header,
    ``X-Auth-Token`` included, to stdout, out of any filter's reach. A BGP password Metal
    returns (``md5``) is made a known secret first, so it is masked too."""
    for password in _passwords(body):
        logredact.add_secret(password)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
    log.info("Metal %s %s: HTTP %d %s", method, request, status, text)


def _passwords(body: Any) -> Iterator[str]:
    """Every BGP MD5 password in a Metal answer (``md5``, ``md5_password``)."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key in ("md5", "md5_password") and isinstance(value, str):
                yield value
            else:
                yield from _passwords(value)
    elif isinstance(body, list):
        for item in body:
            yield from _passwords(item)


class PriorityBucket(TokenBucket):
    """The foreground's token bucket, which background calls watch: they go only while
    :meth:`spare_wait` says more than a reserve of the burst is left, so they hold back during
    a foreground burst and never take its tokens."""

    def spare_wait(self, keep: float) -> float:
        """0.0 when the bucket holds more than ``keep`` tokens (foreground work is not using
        it up), else the seconds until it may; takes no token."""
        if self.rate <= 0:
            return 0.0
        left = self.available()
        return 0.0 if left > keep else max((keep - left) / self.rate, 0.001)


class MetalClient:
    """``metalv1`` behind the limiter, the call counter and the error translation. The SDK is
    imported on the first request (or by :meth:`load_in_background`), not at start-up, and
    only its parts this client uses (:mod:`polyccm_packet.sdk`: about 0.8 s of CPU, against
    2.4 s for the whole package); each API class on its group's first request."""

    def __init__(
        self,
        config: MetalConfig,
        *,
        client: Any = None,
        limiter: TokenBucket | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._client = client
        self.limiter = limiter or PriorityBucket(config.qps, config.burst)
        self.background = TokenBucket(BACKGROUND_QPS, BACKGROUND_BURST)
        """Background calls' own pace, beside the foreground's limiter."""
        self._clock = clock
        self._sleep = sleep
        self._apis: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The ``metalv1`` API client, made (and the SDK imported) on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = make_client(self.config)
        return self._client

    def load_in_background(self) -> threading.Thread:
        """Import the SDK and make the client in a daemon thread, so that the first request
        rarely waits for it."""

        def load() -> None:
            try:
                self.client  # noqa: B018 - the property makes the client
            except Exception:  # the first request reports it
                log.debug("loading the equinix SDK in the background failed", exc_info=True)

        thread = threading.Thread(target=load, name="packet-sdk-load", daemon=True)
        thread.start()
        return thread

    def _api(self, group: str) -> Any:
        if group not in self._apis:
            client = self.client
            metalv1 = sdk.metalv1()

            self._apis[group] = getattr(metalv1, _API_CLASSES[group])(client)
        return self._apis[group]

    def call(self, operation: str, *args: Any, **params: Any) -> Any:
        """Call ``operation`` (``"devices.find_device_by_id"``); the answer's JSON body."""
        method = operation.split(".")[1]
        wait = self.limiter.reserve()
        if wait > MAX_LIMITER_WAIT:
            self.limiter.give_back()
            raise RateLimited(f"Metal {method}: client-side rate limit reached", wait)
        if wait > 0:
            self._sleep(wait)
        return self._send(operation, *args, **params)

    def spare_call(self, operation: str, *args: Any, **params: Any) -> Any:
        """:meth:`call` for background work: at :data:`BACKGROUND_QPS` at most, and only while
        the foreground's limiter has more than half its burst left (node and load-balancer
        work is not using it up), waiting up to :data:`MAX_SPARE_WAIT` seconds for that."""
        limiter = self.limiter
        if not isinstance(limiter, PriorityBucket):
            return self.call(operation, *args, **params)
        waited = self.background.reserve()
        self._sleep(waited)
        while (wait := limiter.spare_wait(limiter.burst / 2)) > 0:
            if waited >= MAX_SPARE_WAIT:
                raise RateLimited(
                    f"Metal {operation.split('.')[1]}: no spare budget for background calls",
                    MAX_LIMITER_WAIT,
                )
            step = min(wait, 1.0)
            self._sleep(step)
            waited += step
        return self._send(operation, *args, **params)

    def _send(self, operation: str, *args: Any, **params: Any) -> Any:
        """One request, counted, its answer translated (the limiter already passed)."""
        import urllib3

        group, method = operation.split(".")
        function = getattr(self._api(group), f"{method}_without_preload_content")
        cloudcalls.record(PROVIDER, method)
        try:
            response = function(*args, _request_timeout=TIMEOUT, **params)
            raw = response.data
        except urllib3.exceptions.HTTPError as error:
            cloudcalls.record_error(PROVIDER, method)
            raise MetalApiError(method, 0, [f"{type(error).__name__}: {error}"]) from None
        status = int(response.status)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if self.config.debug:
            _log_exchange(method, {**dict(enumerate(args)), **params}, status, body, raw)
        if status < 400:
            cloudcalls.record_answer(PROVIDER, method)
            return body
        cloudcalls.record_error(PROVIDER, method)
        raise self._error(method, status, body, response.headers)

    def pages(
        self, operation: str, key: str, *args: Any, per_page: int = PAGE_SIZE,
        spare: bool = False, **params: Any,
    ) -> Iterator[Any]:  # fmt: skip
        """Every item under ``key`` of every page of a list ``operation``, ``per_page`` a
        page (with ``spare``, each page a :meth:`spare_call`)."""
        send = self.spare_call if spare else self.call
        page = 1
        while True:
            body = send(operation, *args, page=page, per_page=per_page, **params) or {}
            items = body.get(key) or []
            yield from items
            meta = body.get("meta") or {}
            last = int(meta.get("last_page") or page)
            if page >= last or not items:
                return
            page += 1

    def _error(
        self, method: str, status: int, body: Any, headers: Mapping[str, str]
    ) -> MetalApiError | RateLimited:
        errors: list[str] = []
        if isinstance(body, dict):
            errors = [str(e) for e in body.get("errors") or ()]
            if body.get("error"):
                errors.append(str(body["error"]))
        if status == 404:
            return NotFound(method, status, errors)
        if status == 429:
            delay = self._retry_delay(headers)
            log.warning("Metal rate limit reached; retrying %s in %.0f s", method, delay)
            return ApiThrottled(
                f"Metal {method}: API rate limit reached; retrying after {delay:.0f} s", delay
            )
        return MetalApiError(method, status, errors)

    def _retry_delay(self, headers: Mapping[str, str]) -> float:
        lowered = {k.lower(): v for k, v in headers.items()}
        for name in ("retry-after", "x-ratelimit-reset"):
            try:
                value = float(lowered.get(name, ""))
            except ValueError:
                continue
            # X-RateLimit-Reset may be seconds from now or an epoch time.
            return max(1.0, value - self._clock() if value > 1e9 else value)
        return 60.0
