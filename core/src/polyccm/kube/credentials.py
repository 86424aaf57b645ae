"""What authenticates requests to the API server now, and fetching it again off the request path.

A :class:`Credential` is what one request sends: an ``Authorization`` value and/or a client
certificate. :class:`Credentials` holds the current one and fetches the next from its source
(an exec plugin, a token file: :mod:`polyccm.kube.config` says how) in a background thread:

* **ahead of time**: once a credential is due (a plugin's credential in the last fifth of its
  life, at most five minutes before it expires; a token file a minute after it was read, as
  client-go reads it again), the next request starts a fetch and goes on with the current one;
* **after a 401**: the API server refused the credential (a plugin's token revoked or expired
  early, a rotated service-account token), so a new one is fetched and the request sent again
  once with it;
* **when expired**: a request whose credential has expired waits for the fetch (it would be
  refused anyway), until :data:`WAIT_SECONDS` after the fetch began: a plugin that hangs holds
  requests up once, not each of them for as long.

No lock is held while a credential is fetched, so a slow plugin delays only the requests that
wait for it; a caller with its own deadline (a Lease renewal) never waits, and sends what there
is (``wait=False``). One fetch runs at a time. A failed fetch is logged in one line (an exec
plugin's output is never shown) and the current credential kept; the next attempt waits
:data:`RETRY_SECONDS`.

A fetched token and client key are added to :mod:`polyccm.logredact`'s secrets (the command
adds the first ones at start), so no log line shows them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polyccm import logredact

log = logging.getLogger(__name__)

REFRESH_AHEAD_SECONDS = 300.0
"""At most this long before its expiry a credential is fetched again (the package's skew)."""
WAIT_SECONDS = 60.0
"""How long a request with an expired or refused credential waits for the next one."""
RETRY_SECONDS = 5.0
"""How long after a failed fetch the next one may start."""


@dataclass(frozen=True)
class Credential:
    """What a request authenticates with; immutable, so a request keeps the one it began with."""

    authorization: str | None = None
    """The ``Authorization`` header's value (``Bearer ...``, ``Basic ...``)."""
    cert_file: str | None = None
    key_file: str | None = None
    expires: float | None = None
    """When the API server stops accepting it (``time.time()``); ``None``: unknown."""
    due: float | None = None
    """When to fetch the next one (``time.time()``); ``None``: never."""

    @staticmethod
    def due_before(expires: float, now: float) -> float:
        """When a credential expiring at ``expires`` (obtained at ``now``) is due."""
        return expires - min(REFRESH_AHEAD_SECONDS, max(0.0, expires - now) / 5)


class Credentials:
    """The current :class:`Credential` of one connection, and its next one fetched with
    ``fetch`` (``None``: the credential never changes), whose errors say what failed in one
    line. Thread-safe."""

    def __init__(
        self,
        first: Credential | None = None,
        fetch: Callable[[], Credential] | None = None,
    ) -> None:
        self._current = first if first is not None else Credential()
        self._fetch = fetch
        self._lock = threading.Lock()  # guards _fetching and _not_before only: never a fetch
        self._fetching: _Fetch | None = None
        self._not_before = 0.0

    @property
    def now(self) -> Credential:
        """The current credential, as it is (no fetch started)."""
        return self._current

    def current(self, *, wait: bool = True) -> Credential:
        """The credential to send now: a fetch starts once it is due; an expired one is
        replaced first when ``wait`` (at most :data:`WAIT_SECONDS`)."""
        credential = self._current
        if credential.due is None or self._fetch is None:
            return credential
        now = time.time()
        if now < credential.due:
            return credential
        fetching = self._start()
        expired = credential.expires is not None and now >= credential.expires
        if wait and expired and fetching is not None:
            fetching.wait()
            return self._current
        return credential

    def refused(self, used: Credential, *, wait: bool = True) -> Credential | None:
        """The API server answered 401 to ``used``: a newer credential to send again with, or
        ``None`` (none can be had: the source has no other, or ``wait`` is off and a fetch
        only started)."""
        if self._fetch is None:
            return None
        if self._current is not used:
            return self._current  # fetched since the request began
        fetching = self._start()
        if not wait or fetching is None:
            return None
        fetching.wait()
        fresh = self._current
        if fresh is used or (fresh.authorization, fresh.cert_file) == (
            used.authorization,
            used.cert_file,
        ):
            return None
        return fresh

    def _start(self) -> _Fetch | None:
        """The running fetch, started if none runs (``None`` while failed fetches wait
        :data:`RETRY_SECONDS`)."""
        with self._lock:
            if self._fetching is not None:
                return self._fetching
            if time.monotonic() < self._not_before:
                return None
            fetching = self._fetching = _Fetch()
        threading.Thread(
            target=self._run, args=(fetching,), name="kube-credential", daemon=True
        ).start()
        return fetching

    def _run(self, fetching: _Fetch) -> None:
        assert self._fetch is not None
        try:
            fresh = self._fetch()
        except Exception as error:  # noqa: BLE001 - any failure keeps the current credential
            with self._lock:
                self._not_before = time.monotonic() + RETRY_SECONDS
            log.warning(
                "cannot renew the Kubernetes credential: %s; the current one is kept", error
            )
        else:
            _mask(fresh)
            self._current = fresh
        finally:
            with self._lock:
                self._fetching = None
            fetching.done.set()


class _Fetch:
    """One fetch under way: when it began, and the event it sets when it ends."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.done = threading.Event()

    def wait(self) -> None:
        """Wait for the fetch to end, until :data:`WAIT_SECONDS` after it began."""
        self.done.wait(max(0.0, WAIT_SECONDS - (time.monotonic() - self.began)))


def _mask(credential: Credential) -> None:
    """Make :mod:`polyccm.logredact` mask what ``credential`` holds."""
    if credential.authorization:
        scheme, _, secret = credential.authorization.partition(" ")
        logredact.add_secret(secret or scheme)
    if credential.key_file:
        try:
            key = Path(credential.key_file).read_text(errors="replace")
        except OSError:
            return
        logredact.add_secret(key)
        for line in key.splitlines():
            if "-" not in line:
                logredact.add_secret(line)
