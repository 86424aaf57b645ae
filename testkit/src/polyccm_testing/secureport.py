"""Reading polyccm's secure port from tests as a kubelet or Prometheus does: HTTPS, with or
without a bearer token or a client certificate, trusting a given CA or (as
``insecure_skip_verify``) nothing, optionally limited to a TLS version or cipher suites."""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Reply:
    """What the secure port answered; ``status`` 0 when it did not (refused, TLS failed)."""

    status: int
    content_type: str = ""
    body: str = ""
    certificate: bytes = b""
    """The server's certificate (DER), as the client received it."""
    tls_version: str = ""
    """The TLS version negotiated (``TLSv1.3``)."""
    cipher: str = ""
    """The cipher suite negotiated, by OpenSSL's name."""


def client_context(
    cafile: Path | None = None,
    *,
    client_cert: tuple[Path, Path] | None = None,
    maximum_version: ssl.TLSVersion | None = None,
    ciphers: str | None = None,
) -> ssl.SSLContext:
    """Verify the server against ``cafile``, or, without it, skip verification; present
    ``client_cert`` (certificate and key files) when asked for one; speak at most
    ``maximum_version``; offer only ``ciphers`` (OpenSSL's names, TLS 1.2 and older)."""
    if cafile is not None:
        context = ssl.create_default_context(cafile=str(cafile))
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert is not None:
        context.load_cert_chain(*client_cert)
    if maximum_version is not None:
        context.maximum_version = maximum_version
    if ciphers is not None:
        context.set_ciphers(ciphers)
    return context


def secure_get(
    port: int,
    path: str,
    *,
    token: str | None = None,
    cafile: Path | None = None,
    host: str = "127.0.0.1",
    timeout: float = 10.0,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """GET ``https://host:port/path``, with ``Authorization: Bearer token`` when given, over
    ``context`` (default: :func:`client_context` of ``cafile``)."""
    connection = http.client.HTTPSConnection(
        host, port, timeout=timeout, context=context or client_context(cafile)
    )
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        connection.request("GET", path, headers=headers)
        sock = connection.sock
        certificate, tls_version, cipher = None, "", ""
        if isinstance(sock, ssl.SSLSocket):
            certificate = sock.getpeercert(binary_form=True)
            tls_version = sock.version() or ""
            cipher = (sock.cipher() or ("",))[0]
        response = connection.getresponse()
        return Reply(
            response.status,
            response.getheader("Content-Type") or "",
            response.read().decode(errors="replace"),
            certificate or b"",
            tls_version,
            cipher,
        )
    except OSError:
        return Reply(0)
    finally:
        connection.close()
