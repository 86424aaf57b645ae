"""Who may read the secure port: delegated authentication and authorization, as
k8s.io/apiserver's DelegatingAuthenticationOptions and DelegatingAuthorizationOptions make them
for the cloud-controller-manager.

Authentication, in upstream's order. With ``--client-ca-file``, a client certificate (verified
against that file's CAs during the TLS handshake, see :mod:`polyccm.serving.certs`) names the
user, as k8s.io/apiserver's x509 authenticator reads it: its subject's CommonName is the user,
each Organization a group, a ``1.3.6.1.4.1.57683.2`` attribute the UID (gate
AllowParsingUserUIDFromCertAuth, on by default) and its SHA-256 the credential id; a certificate
without a CommonName names nobody, one with two UIDs is refused (``401`` unless a token
authenticates). Otherwise a request with ``Authorization: Bearer <token>`` is authenticated by a
TokenReview (authentication.k8s.io/v1) that the API server answers: a token it rejects is
``401``, and so is a review that cannot be made (fail closed). A request with neither is the
anonymous user ``system:anonymous`` (group ``system:unauthenticated``), as with upstream's
delegating authenticator, which allows anonymous requests.

Authorization. A user in ``system:masters`` is allowed (upstream's always-allowed groups), and so
is any request for a path in ``--authorization-always-allow-paths`` (default ``/healthz``,
``/readyz``, ``/livez``; an entry ending in ``*`` is a prefix), which therefore needs no token.
Anything else is a SubjectAccessReview (authorization.k8s.io/v1) of the non-resource path with
the verb ``get``: denied is ``403`` with ``forbidden: User "system:anonymous" cannot get path
"/metrics"`` in a Status, as upstream answers; a review that cannot be made is ``500``.

Answers are cached as upstream caches them, failures excepted: a token's review for
``--authentication-token-webhook-cache-ttl`` (10s, accepted and rejected alike), an access review
for ``--authorization-webhook-cache-authorized-ttl`` or ``-unauthorized-ttl`` (10s each). Each
cache holds at most :data:`CACHE_SIZE` answers, the least recently used going first, and knows a
token only by its HMAC under a key of this process. Tokens never reach the log; a review that
fails is logged with the API server's reason, once per :data:`FAILURE_LOG_INTERVAL` at most.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import urllib3
from cryptography import x509
from cryptography.x509.oid import NameOID, ObjectIdentifier

from polyccm.kube.api import NO_RETRIES, ApiError, JsonObject, KubeApi
from polyccm.kube.config import Configuration

log = logging.getLogger(__name__)

DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
ALWAYS_ALLOW_GROUPS = frozenset({"system:masters"})
AUTHENTICATED_GROUP = "system:authenticated"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
"""The user extra naming the credential a request was authenticated with."""
UID_OID = ObjectIdentifier("1.3.6.1.4.1.57683.2")
"""The subject attribute upstream reads a client certificate's UID from."""
CACHE_SIZE = 8192
"""Answers each cache keeps (upstream's access-review cache holds as many)."""
FAILURE_LOG_INTERVAL = 60.0
"""Seconds between two log lines about the same kind of failing review."""
REVIEW_TIMEOUT = 10.0
"""Seconds a review may take (upstream's client timeout)."""
REVIEW_RETRY = NO_RETRIES
"""A review that fails refuses its request at once: the client asks again (a scrape at its next
interval), and the failure is logged once per interval rather than once per attempt."""
REVIEW_QPS, REVIEW_BURST = 200.0, 400
"""Rate of reviews, upstream's for its delegated-auth client."""

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

Answer = tuple[int, str, bytes]
"""Status, content type and body of a refused request."""


@dataclass(frozen=True)
class User:
    """Who made a request, as the API server authenticated them."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = User("system:anonymous", groups=("system:unauthenticated",))


def parse_always_allow_paths(text: str) -> tuple[str, ...]:
    """``--authorization-always-allow-paths``: comma-separated paths, each starting with ``/``,
    ``*`` only at the end (a prefix); empty allows no path without a review."""
    paths = tuple(part.strip() for part in text.split(",") if part.strip())
    for path in paths:
        if not path.startswith("/"):
            raise argparse.ArgumentTypeError(f"always-allow path {path!r} must start with '/'")
        if "*" in path[:-1]:
            raise argparse.ArgumentTypeError(f"always-allow path {path!r}: only a trailing * works")
    return paths


def path_always_allowed(path: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``allowed`` or starts with one ending in ``*``."""
    return any(
        path.startswith(rule[:-1]) if rule.endswith("*") else path == rule for rule in allowed
    )


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, as upstream reads it; ``None`` for
    anything else (the request is then anonymous)."""
    parts = (header or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def status_answer(code: int, reason: str, message: str) -> Answer:
    """A refusal as the Kubernetes ``Status`` upstream writes."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code,
    }
    return code, "application/json", json.dumps(body).encode() + b"\n"


UNAUTHORIZED = status_answer(401, "Unauthorized", "Unauthorized")

V = TypeVar("V")


class ExpiringCache(Generic[V]):
    """At most ``size`` values, each until its own deadline; the least recently used goes first
    when full. Thread-safe."""

    def __init__(self, size: int = CACHE_SIZE, clock: Callable[[], float] = time.monotonic) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: str, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._entries[key] = (self._clock() + ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True)
class _TokenVerdict:
    user: User | None
    """``None``: the API server rejected the token."""


@dataclass(frozen=True)
class _AccessVerdict:
    allowed: bool
    reason: str


class _FailureLog:
    """Says that a kind of review fails at most once per interval, with how often meanwhile."""

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}
        self._lock = threading.Lock()

    def report(self, review: str, error: Exception) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(review)
            if last is not None and now - last < self._interval:
                self._quiet[review] = self._quiet.get(review, 0) + 1
                return
            self._last[review] = now
            quiet = self._quiet.pop(review, 0)
        hint = ""
        if isinstance(error, ApiError) and error.status == 403:
            hint = " (bind polyccm's ServiceAccount to the ClusterRole system:auth-delegator)"
        log.warning(
            "%s failed, so the secure port refuses requests that need one: %s%s%s",
            review,
            error,
            hint,
            f"; {quiet} more failures since the last report" if quiet else "",
        )


class DelegatedAuth:
    """Decides each request to the secure port by asking the API server (module docstring)."""

    def __init__(
        self,
        authentication: KubeApi,
        authorization: KubeApi,
        *,
        always_allow_paths: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_PATHS,
        token_ttl: float = 10.0,
        authorized_ttl: float = 10.0,
        unauthorized_ttl: float = 10.0,
        certificate_uids: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.authentication = authentication
        self.certificate_uids = certificate_uids
        self.authorization = authorization
        self.always_allow_paths = always_allow_paths
        self.token_ttl = token_ttl
        self.authorized_ttl = authorized_ttl
        self.unauthorized_ttl = unauthorized_ttl
        self._tokens: ExpiringCache[_TokenVerdict] = ExpiringCache(clock=clock)
        self._access: ExpiringCache[_AccessVerdict] = ExpiringCache(clock=clock)
        self._token_key = secrets.token_bytes(32)
        self._failures = _FailureLog(FAILURE_LOG_INTERVAL, clock)

    @classmethod
    def connect(
        cls,
        authentication: Configuration,
        authorization: Configuration,
        *,
        user_agent: str,
        **settings: Any,
    ) -> DelegatedAuth:
        """One client per API server connection, rate-limited apart from the controllers'."""

        def client(configuration: Configuration) -> KubeApi:
            return KubeApi(
                configuration,
                qps=REVIEW_QPS,
                burst=REVIEW_BURST,
                user_agent=f"{user_agent} delegated-auth",
                retry=REVIEW_RETRY,
            )

        return cls(client(authentication), client(authorization), **settings)

    def close(self) -> None:
        self.authentication.close()
        self.authorization.close()

    def check(
        self, path: str, authorization_header: str | None, certificate: bytes | None = None
    ) -> Answer | None:
        """``None`` when a GET of ``path`` may be answered, else the refusal to send;
        ``certificate`` is the client's verified certificate (DER), if it sent one."""
        user: User | None = None
        refused = False
        if certificate is not None:
            try:
                user = certificate_user(certificate, uids=self.certificate_uids)
            except CertificateUserError as error:
                log.debug("client certificate refused: %s", error)
                refused = True
        if user is None:
            token = bearer_token(authorization_header)
            if token is not None:
                user = self.authenticate(token)
            elif not refused:
                user = ANONYMOUS
        if user is None:
            return UNAUTHORIZED
        return self.authorize(user, "get", path)

    def authenticate(self, token: str) -> User | None:
        """The user ``token`` belongs to; ``None`` when rejected or when the review failed."""
        key = hmac.new(self._token_key, token.encode(), hashlib.sha256).hexdigest()
        verdict = self._tokens.get(key)
        if verdict is None:
            body = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            }
            answer = self._review(self.authentication, TOKEN_REVIEWS, body, "TokenReview")
            if answer is None:
                return None
            verdict = _TokenVerdict(_user(answer) if answer.get("authenticated") else None)
            self._tokens.put(key, verdict, self.token_ttl)
        return verdict.user

    def authorize(self, user: User, verb: str, path: str) -> Answer | None:
        """``None`` when ``user`` may ``verb`` ``path``, else the refusal to send."""
        if ALWAYS_ALLOW_GROUPS.intersection(user.groups):
            return None
        if path_always_allowed(path, self.always_allow_paths):
            return None
        spec: JsonObject = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {name: list(values) for name, values in user.extra}
        key = json.dumps(spec, sort_keys=True)
        verdict = self._access.get(key)
        if verdict is None:
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            }
            answer = self._review(self.authorization, ACCESS_REVIEWS, body, "SubjectAccessReview")
            if answer is None:
                message = f"Internal Server Error: {json.dumps(path)}: authorization failed\n"
                return 500, "text/plain; charset=utf-8", message.encode()
            allowed = bool(answer.get("allowed")) and not answer.get("denied")
            verdict = _AccessVerdict(allowed, str(answer.get("reason") or ""))
            ttl = self.authorized_ttl if allowed else self.unauthorized_ttl
            self._access.put(key, verdict, ttl)
        if verdict.allowed:
            return None
        message = f"forbidden: User {json.dumps(user.name)} cannot {verb} path {json.dumps(path)}"
        if verdict.reason:
            message += f": {verdict.reason}"
        return status_answer(403, "Forbidden", message)

    def _review(self, api: KubeApi, path: str, body: JsonObject, kind: str) -> JsonObject | None:
        """The ``status`` the API server answers to review ``body``; ``None`` when it could not
        be asked (logged, without the body: it may hold a token)."""
        try:
            answer = api.request("POST", path, body=body, timeout=REVIEW_TIMEOUT)
        except (ApiError, urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            self._failures.report(kind, error)
            return None
        status = answer.get("status")
        return status if isinstance(status, dict) else {}


def _user(status: JsonObject) -> User:
    """The user of an accepted TokenReview, in ``system:authenticated`` as upstream adds."""
    user = status.get("user") or {}
    groups = tuple(str(group) for group in user.get("groups") or ())
    if AUTHENTICATED_GROUP not in groups:
        groups += (AUTHENTICATED_GROUP,)
    extra = tuple(
        sorted(
            (str(name), tuple(str(value) for value in values or ()))
            for name, values in (user.get("extra") or {}).items()
        )
    )
    return User(str(user.get("username") or ""), str(user.get("uid") or ""), groups, extra)


class CertificateUserError(Exception):
    """A verified client certificate that cannot name a user (upstream: an authentication
    error, so ``401`` unless a bearer token authenticates)."""


def certificate_user(der: bytes, *, uids: bool = True) -> User | None:
    """The user a verified client certificate names, as upstream's
    ``CommonNameUserConversion``; ``None`` when its subject has no CommonName."""
    certificate = x509.load_der_x509_certificate(der)
    subject = certificate.subject
    common_names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    # Go keeps the last CommonName of a subject that has several.
    name = str(common_names[-1].value) if common_names else ""
    if not name:
        return None
    uid = ""
    if uids:
        found = [attribute.value for attribute in subject.get_attributes_for_oid(UID_OID)]
        if any(not isinstance(value, str) for value in found):
            raise CertificateUserError("unable to parse UID into a string")
        if len(found) > 1:
            raise CertificateUserError(f"expected 1 UID, but found multiple: {found}")
        if found and not found[0]:
            raise CertificateUserError("UID cannot be an empty string")
        uid = str(found[0]) if found else ""
    groups = tuple(
        str(attribute.value)
        for attribute in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )
    if AUTHENTICATED_GROUP not in groups:
        groups += (AUTHENTICATED_GROUP,)
    fingerprint = hashlib.sha256(der).hexdigest()
    return User(name, uid, groups, ((CREDENTIAL_ID, (f"X509SHA256={fingerprint}",)),))
