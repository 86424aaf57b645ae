"""``--tls-min-version`` and ``--tls-cipher-suites`` on the secure port, in Go's names as
upstream's secure serving takes them (component-base v0.35.4 cli/flag/ciphersuites_flag.go,
apiserver v0.35.4 pkg/server/options/serving.go:312-325), seen by real TLS clients."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from polyccm.health import HealthServer
from polyccm.serving import certs
from polyccm_testing.secureport import Reply, client_context, secure_get


@contextmanager
def serving(min_version: str = "", suites: tuple[str, ...] = ()) -> Iterator[int]:
    context = certs.server_context(
        cert_file=None,
        key_file=None,
        cert_dir="",
        bind_address="127.0.0.1",
        min_version=min_version,
        cipher_suites=suites,
    )
    server = HealthServer("127.0.0.1", 0, tls=context)
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def get(port: int, maximum: ssl.TLSVersion | None = None, ciphers: str | None = None) -> Reply:
    context = client_context(maximum_version=maximum, ciphers=ciphers)
    return secure_get(port, "/healthz", context=context)


def test_min_version_tls13_refuses_a_tls12_client() -> None:
    with serving("VersionTLS13") as port:
        assert get(port, maximum=ssl.TLSVersion.TLSv1_2).status == 0, "handshake refused"
        reply = get(port)
        assert (reply.status, reply.tls_version) == (200, "TLSv1.3")


def test_without_a_min_version_tls12_is_served_as_upstreams_default() -> None:
    # component-base cli/flag/ciphersuites_flag.go:131-148: empty is DefaultTLSVersion, 1.2.
    with serving() as port:
        reply = get(port, maximum=ssl.TLSVersion.TLSv1_2)
        assert (reply.status, reply.tls_version) == (200, "TLSv1.2")


def test_cipher_suites_limit_what_a_tls12_client_may_negotiate() -> None:
    with serving(suites=("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",)) as port:
        tls12 = ssl.TLSVersion.TLSv1_2
        assert get(port, maximum=tls12, ciphers="ECDHE-RSA-AES128-GCM-SHA256").status == 0
        reply = get(port, maximum=tls12, ciphers="ECDHE-RSA-AES128-GCM-SHA256:AES256-SHA")
        assert reply.status == 0, "only the listed suite"
        reply = get(port, maximum=tls12)
        assert (reply.status, reply.cipher) == (200, "ECDHE-RSA-AES256-GCM-SHA384")
        # TLS 1.3 suites are not chosen by the list, in Go as here.
        assert get(port).tls_version == "TLSv1.3"


def test_tls13_suites_alone_leave_only_tls13() -> None:
    with serving(suites=("TLS_AES_128_GCM_SHA256",)) as port:
        assert get(port, maximum=ssl.TLSVersion.TLSv1_2).status == 0
        assert get(port).status == 200


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--tls-min-version=VersionTLS14", "unknown tls version 'VersionTLS14'"),
        ("--tls-min-version=TLS1.3", "unknown tls version 'TLS1.3'"),
        (
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-RSA-AES128-SHA",
            "Cipher suite ECDHE-RSA-AES128-SHA not supported or doesn't exist",
        ),
    ],
)
def test_an_unknown_name_exits_2_with_one_line(flag: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "polyccm.cli", "--provider=gce", flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
