"""Keys and certificates for a local kube-apiserver: a private CA, a serving certificate for
127.0.0.1 signed by it, and the service-account signing key pair.

The CA goes into the kubeconfig, so clients verify the server instead of skipping TLS checks.
The ``cryptography`` package does the work when it is installed; otherwise the ``openssl``
command does.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Names the serving certificate is valid for: loopback, and the in-cluster names of the
#: ``kubernetes`` service (10.0.0.1 is the first address of the service range).
SERVING_DNS_NAMES: tuple[str, ...] = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS: tuple[str, ...] = ("127.0.0.1", "10.0.0.1")
VALID_DAYS = 365


class PkiError(RuntimeError):
    """The keys or certificates could not be generated."""


@dataclass(frozen=True)
class Pki:
    """Paths of the generated files (all PEM)."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_public_key: Path

    @classmethod
    def in_directory(cls, directory: Path) -> Pki:
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            service_account_key=directory / "sa.key",
            service_account_public_key=directory / "sa.pub",
        )


def generate(directory: Path, *, use_openssl: bool | None = None) -> Pki:
    """Write a fresh CA, serving certificate and service-account key pair into ``directory``.

    ``use_openssl`` forces a backend; by default ``cryptography`` is used when importable.
    """
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    pki = Pki.in_directory(directory)
    if use_openssl is None:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            use_openssl = True
        else:
            use_openssl = False
    if use_openssl:
        _generate_with_openssl(pki)
    else:
        _generate_with_cryptography(pki)
    for key in (pki.ca_key, pki.serving_key, pki.service_account_key):
        key.chmod(0o600)
    return pki


def _generate_with_cryptography(pki: Pki) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def new_key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )

    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=VALID_DAYS)

    ca_key = new_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "polyccm-dev-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    serving_key = new_key()
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVING_DNS_NAMES]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVING_IPS]
    serving_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    service_account_key = new_key()

    write_key(ca_key, pki.ca_key)
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    write_key(serving_key, pki.serving_key)
    pki.serving_cert.write_bytes(serving_cert.public_bytes(serialization.Encoding.PEM))
    write_key(service_account_key, pki.service_account_key)
    pki.service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _openssl(*arguments: str, cwd: Path) -> None:
    completed = subprocess.run(
        ["openssl", *arguments], cwd=cwd, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise PkiError(f"openssl {arguments[0]} failed: {completed.stderr.strip()}")


def _generate_with_openssl(pki: Pki) -> None:
    if shutil.which("openssl") is None:
        raise PkiError("neither the cryptography package nor the openssl command is installed")
    directory = pki.ca_cert.parent
    days = str(VALID_DAYS)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", days,
        "-subj", "/CN=polyccm-dev-ca",
        "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
        "-addext", "keyUsage=critical,digitalSignature,keyCertSign,cRLSign",
        "-keyout", str(pki.ca_key), "-out", str(pki.ca_cert),
        cwd=directory,
    )  # fmt: skip
    csr = directory / "apiserver.csr"
    extensions = directory / "apiserver.ext"
    alt_names = [f"DNS:{name}" for name in SERVING_DNS_NAMES]
    alt_names += [f"IP:{ip}" for ip in SERVING_IPS]
    extensions.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(alt_names)}\n"
    )
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
        "-keyout", str(pki.serving_key), "-out", str(csr),
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-sha256", "-days", days, "-in", str(csr),
        "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key), "-set_serial", "2",
        "-extfile", str(extensions), "-out", str(pki.serving_cert),
        cwd=directory,
    )  # fmt: skip
    csr.unlink()
    extensions.unlink()
    _openssl("genrsa", "-out", str(pki.service_account_key), "2048", cwd=directory)
    _openssl(
        "rsa", "-in", str(pki.service_account_key), "-pubout",
        "-out", str(pki.service_account_public_key),
        cwd=directory,
    )  # fmt: skip


def client_certificate(
    pki: Pki,
    directory: Path,
    *,
    user: str,
    groups: tuple[str, ...] = (),
    uids: tuple[str, ...] = (),
    client_auth: bool = True,
) -> tuple[Path, Path]:
    """A client certificate signed by ``pki``'s CA, as a kubeconfig's ``client-certificate``:
    CommonName ``user``, one Organization per group, one ``1.3.6.1.4.1.57683.2`` (UID) attribute
    per uid, for client authentication (server authentication only without ``client_auth``).
    Returns the certificate and key files written in ``directory``."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    attributes += [x509.NameAttribute(ObjectIdentifier("1.3.6.1.4.1.57683.2"), uid) for uid in uids]
    if user:
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client_auth else ExtendedKeyUsageOID.SERVER_AUTH
    return _leaf(
        pki,
        directory,
        subject=x509.Name(attributes),
        extensions=[x509.ExtendedKeyUsage([usage])],
        stem=lambda serial: f"client-{user or 'anonymous'}-{serial % 10**8}",
    )


def serving_certificate(
    pki: Pki, directory: Path, *, dns_names: tuple[str, ...], stem: str = "serving"
) -> tuple[Path, Path]:
    """A one-day serving certificate signed by ``pki``'s CA for ``dns_names`` (a TLS server
    that answers for those names, as a client trusting the CA checks them). Returns the
    certificate and key files written in ``directory`` as ``<stem>.crt`` and ``<stem>.key``."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    return _leaf(
        pki,
        directory,
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]),
        extensions=[
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
            x509.SubjectAlternativeName([x509.DNSName(name) for name in dns_names]),
        ],
        stem=lambda _serial: stem,
    )


def _leaf(
    pki: Pki,
    directory: Path,
    *,
    subject: Any,
    extensions: list[Any],
    stem: Callable[[int], str],
) -> tuple[Path, Path]:
    """A one-day EC certificate for ``subject`` with ``extensions`` (non-critical), signed by
    ``pki``'s CA; written as ``<stem(serial)>.crt`` and ``.key`` (private) in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise PkiError(f"{pki.ca_key}: an RSA or EC key was expected")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    directory.mkdir(parents=True, exist_ok=True)
    base = directory / stem(certificate.serial_number)
    cert_file, key_file = base.with_name(base.name + ".crt"), base.with_name(base.name + ".key")
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file
