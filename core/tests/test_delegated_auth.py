"""The pieces of delegated auth that need no API server: reading the bearer token, a client
certificate's user and the always-allowed paths as upstream reads them, and the bounded,
expiring cache of review answers. The reviews themselves are tested against the real API server
in test_secure_port."""

from __future__ import annotations

import argparse
import datetime
import hashlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from polyccm.serving.delegated import (
    CREDENTIAL_ID,
    UID_OID,
    CertificateUserError,
    ExpiringCache,
    User,
    bearer_token,
    certificate_user,
    parse_always_allow_paths,
    path_always_allowed,
)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer abc  ", "abc"),
        ("Bearer abc extra", "abc"),
        ("Bearer  abc", None),  # upstream: an empty token (two spaces) is no token
        ("Bearer", None),
        ("Basic dXNlcjpwYXNz", None),
        ("", None),
        (None, None),
    ],
)
def test_the_bearer_token_is_read_as_upstream_reads_it(
    header: str | None, token: str | None
) -> None:
    assert bearer_token(header) == token


def test_always_allowed_paths_are_exact_or_a_trailing_star_prefix() -> None:
    allowed = parse_always_allow_paths("/healthz, /debug/*,/")
    assert allowed == ("/healthz", "/debug/*", "/")
    assert path_always_allowed("/healthz", allowed)
    assert not path_always_allowed("/healthz/ping", allowed)
    assert path_always_allowed("/debug/pprof", allowed)
    assert path_always_allowed("/", allowed)
    assert not path_always_allowed("/metrics", allowed)
    assert parse_always_allow_paths("") == ()


@pytest.mark.parametrize("text", ["healthz", "/a*/b", "/healthz,*"])
def test_malformed_always_allowed_paths_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_always_allow_paths(text)


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    now = [0.0]
    cache: ExpiringCache[str] = ExpiringCache(size=2, clock=lambda: now[0])
    cache.put("a", "A", 10)
    cache.put("b", "B", 10)
    assert cache.get("a") == "A"  # now "b" is the least recently used
    cache.put("c", "C", 10)
    assert len(cache) == 2
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")


def test_cached_answers_expire_and_a_zero_ttl_caches_nothing() -> None:
    now = [0.0]
    cache: ExpiringCache[str] = ExpiringCache(clock=lambda: now[0])
    cache.put("allowed", "yes", 10)
    cache.put("uncached", "no", 0)
    now[0] = 9.9
    assert cache.get("allowed") == "yes"
    assert cache.get("uncached") is None
    now[0] = 10.0
    assert cache.get("allowed") is None
    assert len(cache) == 0


def _certificate(*attributes: tuple[x509.ObjectIdentifier, str]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")]))
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.DER)


def test_a_client_certificate_names_its_user_as_upstreams_x509_authenticator() -> None:
    # apiserver v0.35.4 pkg/authentication/request/x509/x509.go:279-302.
    der = _certificate(
        (NameOID.ORGANIZATION_NAME, "ops"),
        (NameOID.COMMON_NAME, "first"),
        (NameOID.ORGANIZATION_NAME, "system:masters"),
        (NameOID.COMMON_NAME, "jane"),  # Go's pkix.Name keeps the last CommonName
        (UID_OID, "uid-1"),
    )
    fingerprint = hashlib.sha256(der).hexdigest()
    assert certificate_user(der) == User(
        "jane",
        "uid-1",
        ("ops", "system:masters", "system:authenticated"),
        ((CREDENTIAL_ID, (f"X509SHA256={fingerprint}",)),),
    )
    # With AllowParsingUserUIDFromCertAuth off (x509.go:306-309) the UID is not read.
    user = certificate_user(der, uids=False)
    assert user is not None and user.uid == ""


def test_a_client_certificate_without_a_common_name_names_nobody() -> None:
    assert certificate_user(_certificate((NameOID.ORGANIZATION_NAME, "ops"))) is None


@pytest.mark.parametrize("uids", [("a", "b"), ("",)])
def test_a_client_certificate_with_bad_uids_is_an_authentication_error(
    uids: tuple[str, ...],
) -> None:
    # x509.go:322-330.
    der = _certificate((NameOID.COMMON_NAME, "jane"), *((UID_OID, uid) for uid in uids))
    with pytest.raises(CertificateUserError):
        certificate_user(der)
    assert certificate_user(der, uids=False) is not None
