"""The secure port's certificate, chosen as k8s.io/apiserver's SecureServingOptions chooses it for
the cloud-controller-manager.

* ``--tls-cert-file`` and ``--tls-private-key-file``: those files (the first may hold a chain).
* Otherwise, with ``--cert-dir``: ``cloud-controller-manager.crt`` and ``.key`` there, reused when
  they load and the certificate is within its validity, else generated and written there (the
  key readable by its owner only), so a restart serves the same certificate.
* Otherwise (``--cert-dir`` empty, upstream's default): generated at start and never written to a
  disk: OpenSSL reads it from an anonymous memory file (``memfd``), or, on a system without one,
  from a private temporary file removed as soon as it is loaded.

A read-only root filesystem therefore works: nothing but ``--cert-dir`` (or, without ``memfd``,
the temporary directory) is written. A generated certificate is shaped as upstream's
``certutil.GenerateSelfSignedCertKey`` makes it: a CA ``localhost-ca@<unix time>`` and, signed
by it, ``localhost@<unix time>`` for ``localhost``, ``127.0.0.1`` and the ``--bind-address`` when
that is a specific address; RSA 2048, valid for a year from an hour ago. The ``.crt`` holds the
serving certificate, then the CA: a client that wants to verify trusts the last one.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import re
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from polyccm.serving import PAIR_NAME, tls

log = logging.getLogger(__name__)

HOST = "localhost"
"""The name a generated certificate is made for (upstream's ``publicAddress``)."""
VALID_FOR = datetime.timedelta(days=365)
BACKDATED = datetime.timedelta(hours=1)


PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class CertificateError(Exception):
    """The serving certificate cannot be loaded, made or written (one line, for the user)."""


def server_context(
    *,
    cert_file: str | None,
    key_file: str | None,
    cert_dir: str,
    bind_address: str,
    min_version: str = "",
    cipher_suites: tuple[str, ...] = (),
    client_ca_file: str | None = None,
) -> ssl.SSLContext:
    """The TLS server context for the secure port, as the module docstring says, restricted to
    ``--tls-min-version`` and ``--tls-cipher-suites`` (:mod:`polyccm.serving.tls`) and, with a
    ``--client-ca-file``, asking clients for a certificate signed by one of its CAs."""
    context = _serving_context(cert_file, key_file, cert_dir, bind_address)
    try:
        tls.apply(context, min_version, cipher_suites)
    except tls.TlsSettingsError as error:
        raise CertificateError(str(error)) from None
    if client_ca_file:
        _trust_client_certificates(context, client_ca_file)
    return context


def check_files(
    cert_file: str | None, key_file: str | None, client_ca_file: str | None = None
) -> list[str]:
    """Check ``--tls-cert-file`` and ``--tls-private-key-file`` (when given) as upstream's
    apiserver checks them when it loads them at start (dynamiccertificates'
    ``loadCertKeyPair``: both readable and not empty, then Go's ``tls.X509KeyPair``: PEM
    certificates and a PEM private key that matches the first), and ``--client-ca-file``;
    :class:`CertificateError` naming the file at fault and why, in one line.

    Returns warnings: a certificate outside its validity is served all the same, as upstream
    serves it (a client that verifies refuses it; a probe that does not still gets answers)."""
    warnings: list[str] = []
    if cert_file and key_file:
        certificate = _certificate_in(cert_file)
        key = _private_key_in(key_file)
        if _public_der(certificate.public_key()) != _public_der(key.public_key()):
            raise CertificateError(
                f"--tls-private-key-file {key_file} does not match the certificate in "
                f"--tls-cert-file {cert_file} (its public key is another one)"
            )
        now = datetime.datetime.now(datetime.UTC)
        if now >= certificate.not_valid_after_utc:
            warnings.append(
                f"--tls-cert-file {cert_file}: the certificate expired on "
                f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M}Z; served all the same, as "
                "upstream does, but a client that verifies it refuses it"
            )
        elif now < certificate.not_valid_before_utc:
            warnings.append(
                f"--tls-cert-file {cert_file}: the certificate is not valid before "
                f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M}Z; served all the same, as "
                "upstream does, but a client that verifies it refuses it"
            )
    if client_ca_file:
        _trust_client_certificates(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), client_ca_file)
    return warnings


#: More than any certificate chain or key: a bigger file (``/dev/zero``) is no certificate.
MAX_FILE_BYTES = 1 << 20
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)


def _read(flag: str, path: str) -> tuple[bytes, list[str]]:
    """The bytes of ``path`` and the types of its PEM blocks (``CERTIFICATE``...)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise CertificateError(f"cannot read {flag} {path}: {_reason(error)}") from None
    if not data.strip():
        raise CertificateError(f"{flag} {path} is empty")
    if len(data) > MAX_FILE_BYTES:
        raise CertificateError(f"{flag} {path} is larger than 1 MiB: no certificate or key is")
    kinds = [match.group(1).decode() for match in _PEM_BLOCK.finditer(data)]
    return data, kinds


def _certificate_in(path: str) -> x509.Certificate:
    """The first certificate of ``--tls-cert-file`` (the serving one), every one checked."""
    data, kinds = _read("--tls-cert-file", path)
    if "CERTIFICATE" not in kinds:
        if any(kind.endswith("PRIVATE KEY") for kind in kinds):
            raise CertificateError(f"--tls-cert-file {path} holds a private key, not a certificate")
        raise CertificateError(f"--tls-cert-file {path} holds no PEM certificate")
    blocks = [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1) == b"CERTIFICATE"]
    certificates = []
    for number, block in enumerate(blocks, 1):
        try:
            certificates.append(x509.load_pem_x509_certificate(block))
        except ValueError as error:
            raise CertificateError(
                f"--tls-cert-file {path}: certificate {number} is not a valid X.509 "
                f"certificate ({_reason(error)})"
            ) from None
    return certificates[0]


def _private_key_in(path: str) -> PrivateKey:
    """The private key of ``--tls-private-key-file``: the first PEM block whose type ends in
    ``PRIVATE KEY``, as Go's ``tls.X509KeyPair`` takes it."""
    data, kinds = _read("--tls-private-key-file", path)
    blocks = [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1).endswith(b"PRIVATE KEY")]
    if not blocks:
        if "CERTIFICATE" in kinds:
            raise CertificateError(
                f"--tls-private-key-file {path} holds a certificate, not a PEM private key"
            )
        raise CertificateError(f"--tls-private-key-file {path} holds no PEM private key")
    try:
        key = serialization.load_pem_private_key(blocks[0], password=None)
    except TypeError:
        raise CertificateError(
            f"--tls-private-key-file {path} is encrypted: give the key without a passphrase"
        ) from None
    except (ValueError, UnsupportedAlgorithm) as error:
        raise CertificateError(
            f"--tls-private-key-file {path} is not a valid private key ({_reason(error)})"
        ) from None
    if not isinstance(
        key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)
    ):
        raise CertificateError(
            f"--tls-private-key-file {path}: a {type(key).__name__} cannot serve TLS (RSA, ECDSA "
            "or Ed25519, as Go)"
        )
    return key


def _public_der(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _serving_context(
    cert_file: str | None, key_file: str | None, cert_dir: str, bind_address: str
) -> ssl.SSLContext:
    if cert_file and key_file:
        check_files(cert_file, key_file)
        try:
            return _context(cert_file, key_file)
        except (OSError, ssl.SSLError) as error:
            raise CertificateError(
                f"cannot load --tls-cert-file {cert_file} / --tls-private-key-file {key_file}: "
                f"{_reason(error)}"
            ) from None
    if cert_dir:
        return _from_cert_dir(Path(cert_dir), bind_address)
    chain, key = generate_self_signed(bind_address)
    context = _context_in_memory(chain, key)
    log.info("generated a self-signed serving certificate in memory")
    return context


def _trust_client_certificates(context: ssl.SSLContext, ca_file: str) -> None:
    """Ask each client for a certificate, optional as upstream's (a client without one is
    authenticated otherwise), and verify one that is sent against ``ca_file`` for client
    authentication (OpenSSL's server-side default purpose, as Go's ``ExtKeyUsageClientAuth``).
    A certificate that does not verify ends the handshake; upstream answers its requests 401."""
    try:
        context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise CertificateError(
            f"cannot load --client-ca-file {ca_file}: {_reason(error)}"
        ) from None
    context.verify_mode = ssl.CERT_OPTIONAL


def generate_self_signed(bind_address: str) -> tuple[bytes, bytes]:
    """A fresh serving certificate and its CA (PEM, in that order) and the serving key (PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    stamp = int(now.timestamp())
    ca_key = _new_key()
    ca_name = _name(f"{HOST}-ca@{stamp}")
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = _new_key()
    names: list[x509.GeneralName] = [
        x509.DNSName(HOST),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    bound = ipaddress.ip_address(bind_address)
    if not bound.is_unspecified and not bound.is_loopback:
        names.append(x509.IPAddress(bound))
    serving = (
        _builder(_name(f"{HOST}@{stamp}"), ca_name, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    chain = serving.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(
        serialization.Encoding.PEM
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return chain, pem_key


# -- the three sources ----------------------------------------------------------------------


def _from_cert_dir(directory: Path, bind_address: str) -> ssl.SSLContext:
    cert_path = directory / f"{PAIR_NAME}.crt"
    key_path = directory / f"{PAIR_NAME}.key"
    if cert_path.exists() or key_path.exists():
        problem = _unusable(cert_path, key_path)
        if problem is None:
            log.info("serving with the certificate in %s", cert_path)
            return _context(cert_path, key_path)
        log.warning("%s: %s; generating a new self-signed certificate", cert_path, problem)
    chain, key = generate_self_signed(bind_address)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _write(key_path, key, 0o600)
        _write(cert_path, chain, 0o644)
        context = _context(cert_path, key_path)
    except (OSError, ssl.SSLError) as error:
        raise CertificateError(
            f"cannot write a self-signed certificate to --cert-dir {directory}: {_reason(error)}"
        ) from None
    log.info("generated a self-signed certificate (%s, %s)", cert_path, key_path)
    return context


def _context_in_memory(chain: bytes, key: bytes) -> ssl.SSLContext:
    """Load ``key`` and ``chain`` without writing them to a disk where the system allows."""
    data = key + chain
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        try:
            fd = memfd_create("polyccm-serving-certificate", os.MFD_CLOEXEC)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                _write_all(fd, data)
                # Opening the descriptor's /proc path reads the memory file from its start.
                return _context(f"/proc/self/fd/{fd}", None)
            except (OSError, ssl.SSLError):
                pass  # no /proc: the temporary file below
            finally:
                os.close(fd)
    name = ""
    try:
        fd, name = tempfile.mkstemp(prefix="polyccm-serving-", suffix=".pem")  # mode 0600
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return _context(name, None)
    except (OSError, ssl.SSLError) as error:
        raise CertificateError(
            f"cannot load the generated self-signed certificate: {_reason(error)} "
            "(set --cert-dir to a writable directory)"
        ) from None
    finally:
        if name:
            Path(name).unlink(missing_ok=True)


# -- plumbing -------------------------------------------------------------------------------


def _context(cert_file: str | Path, key_file: str | Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def _unusable(cert_path: Path, key_path: Path) -> str | None:
    """Why the pair in ``--cert-dir`` cannot be served, or ``None`` when it can."""
    try:
        _context(cert_path, key_path)
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ssl.SSLError, ValueError) as error:
        return f"unusable ({_reason(error)})"
    now = datetime.datetime.now(datetime.UTC)
    if not certificate.not_valid_before_utc <= now < certificate.not_valid_after_utc:
        return f"not valid now (valid until {certificate.not_valid_after_utc:%Y-%m-%d %H:%M}Z)"
    return None


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` with ``data`` at once, so a crash never leaves half a file."""
    partial = path.with_name(f".{path.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _reason(error: Exception) -> str:
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    return " ".join(str(error).split()) or type(error).__name__


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: rsa.RSAPublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATED)
        .not_valid_after(now - BACKDATED + VALID_FOR)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=True,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
