"""The secure port's certificate: the given files, else a self-signed one kept in --cert-dir (and
reused) or only in memory, as upstream's secure serving picks it."""

from __future__ import annotations

import datetime
import ssl
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from polyccm.health import HealthServer
from polyccm.serving import certs
from polyccm_testing.secureport import Reply, secure_get


def _serve(context: ssl.SSLContext, *, cafile: Path | None = None) -> Reply:
    server = HealthServer("127.0.0.1", 0, tls=context)
    server.start()
    try:
        return secure_get(server.port, "/healthz", cafile=cafile)
    finally:
        server.stop()


def _pem_certificates(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def _der(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.DER)


@pytest.fixture
def in_cert_dir(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    directory = tmp_path / "certs"
    yield (
        directory,
        directory / "cloud-controller-manager.crt",
        directory / "cloud-controller-manager.key",
    )


def test_a_self_signed_certificate_is_written_to_cert_dir_and_reused(
    in_cert_dir: tuple[Path, Path, Path],
) -> None:
    directory, crt, key = in_cert_dir
    context = certs.server_context(
        cert_file=None, key_file=None, cert_dir=str(directory), bind_address="0.0.0.0"
    )
    serving, ca = _pem_certificates(crt)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert serving.subject.rfc4514_string().startswith("CN=localhost@")
    assert ca.subject.rfc4514_string().startswith("CN=localhost-ca@")
    # The CA (the file's last certificate) lets a client verify the server as 127.0.0.1.
    ca_file = directory.parent / "ca.crt"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    reply = _serve(context, cafile=ca_file)
    assert reply.status == 200 and reply.certificate == _der(serving)

    before = (crt.read_bytes(), key.read_bytes())
    again = certs.server_context(
        cert_file=None, key_file=None, cert_dir=str(directory), bind_address="0.0.0.0"
    )
    assert (crt.read_bytes(), key.read_bytes()) == before, "a restart reuses the pair"
    assert _serve(again).certificate == _der(serving)


def test_an_expired_certificate_in_cert_dir_is_replaced(
    in_cert_dir: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, crt, _ = in_cert_dir
    with monkeypatch.context() as patch:
        patch.setattr(certs, "VALID_FOR", datetime.timedelta(minutes=30))  # ended 30 min ago
        certs.server_context(
            cert_file=None, key_file=None, cert_dir=str(directory), bind_address="127.0.0.1"
        )
    expired = _pem_certificates(crt)[0]
    context = certs.server_context(
        cert_file=None, key_file=None, cert_dir=str(directory), bind_address="127.0.0.1"
    )
    fresh = _pem_certificates(crt)[0]
    assert fresh.serial_number != expired.serial_number
    assert fresh.not_valid_after_utc > datetime.datetime.now(datetime.UTC)
    assert _serve(context).certificate == _der(fresh)


def test_a_specific_bind_address_is_in_the_certificate(
    in_cert_dir: tuple[Path, Path, Path],
) -> None:
    directory, crt, _ = in_cert_dir
    certs.server_context(
        cert_file=None, key_file=None, cert_dir=str(directory), bind_address="10.1.2.3"
    )
    names = _pem_certificates(crt)[0].extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert {str(ip) for ip in names.value.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "10.1.2.3",
    }
    assert names.value.get_values_for_type(x509.DNSName) == ["localhost"]


def test_without_cert_dir_nothing_is_written_even_without_a_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a read-only root filesystem with no writable /tmp: the certificate stays in memory.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    context = certs.server_context(
        cert_file=None, key_file=None, cert_dir="", bind_address="0.0.0.0"
    )
    reply = _serve(context)
    assert reply.status == 200
    served = x509.load_der_x509_certificate(reply.certificate)
    assert served.subject.rfc4514_string().startswith("CN=localhost@")
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cert_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(certs.CertificateError) as raised:
        certs.server_context(
            cert_file=None, key_file=None, cert_dir=str(blocker / "certs"), bind_address="0.0.0.0"
        )
    assert str(raised.value).startswith(
        f"cannot write a self-signed certificate to --cert-dir {blocker}"
    )
    assert "\n" not in str(raised.value)


def test_without_memfd_a_private_temporary_file_is_removed_once_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    context = certs.server_context(
        cert_file=None, key_file=None, cert_dir="", bind_address="0.0.0.0"
    )
    assert _serve(context).status == 200
    assert list(tmp_path.iterdir()) == []


def test_an_expired_tls_cert_file_is_served_with_a_warning_as_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # apiserver v0.35.4 pkg/server/dynamiccertificates/dynamic_serving_content.go:85-102 checks
    # that both files have content and that the key matches (tls.X509KeyPair), never the
    # dates: an expired certificate is served. Refusing it would stop the whole controller
    # manager over its metrics port; polyccm serves it and says so at start.
    with monkeypatch.context() as patch:
        patch.setattr(certs, "VALID_FOR", datetime.timedelta(minutes=30))  # ended 30 min ago
        chain, key = certs.generate_self_signed("127.0.0.1")
    crt, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(chain)
    key_file.write_bytes(key)
    (warning,) = certs.check_files(str(crt), str(key_file))
    assert warning.startswith(f"--tls-cert-file {crt}: the certificate expired on ")
    context = certs.server_context(
        cert_file=str(crt), key_file=str(key_file), cert_dir="", bind_address="127.0.0.1"
    )
    assert _serve(context).certificate == _der(_pem_certificates(crt)[0])
