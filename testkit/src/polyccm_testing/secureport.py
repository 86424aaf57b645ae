"""Reading polyccm's secure port from tests as a kubelet or Prometheus does: HTTPS, with or
without a bearer token, trusting a given CA or (as ``insecure_skip_verify``) nothing."""

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


def client_context(cafile: Path | None = None) -> ssl.SSLContext:
    """Verify the server against ``cafile``, or, without it, skip verification."""
    if cafile is not None:
        return ssl.create_default_context(cafile=str(cafile))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def secure_get(
    port: int,
    path: str,
    *,
    token: str | None = None,
    cafile: Path | None = None,
    host: str = "127.0.0.1",
    timeout: float = 10.0,
) -> Reply:
    """GET ``https://host:port/path``, with ``Authorization: Bearer token`` when given."""
    connection = http.client.HTTPSConnection(
        host, port, timeout=timeout, context=client_context(cafile)
    )
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        connection.request("GET", path, headers=headers)
        sock = connection.sock
        certificate = (
            sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
        )
        response = connection.getresponse()
        return Reply(
            response.status,
            response.getheader("Content-Type") or "",
            response.read().decode(errors="replace"),
            certificate or b"",
        )
    except OSError:
        return Reply(0)
    finally:
        connection.close()
