"""``--tls-min-version`` and ``--tls-cipher-suites`` as upstream's secure serving reads them, in
Go's names (component-base's ``cliflag.TLSVersion`` and ``TLSCipherSuites``), applied to the
secure port's Python :class:`ssl.SSLContext`.

The versions are ``VersionTLS10`` to ``VersionTLS13``; none given means TLS 1.2, upstream's
default. The suites are Go's crypto/tls names, insecure ones included as upstream accepts them;
each TLS 1.2 (and older) suite maps to OpenSSL's name for it. TLS 1.3 suites are accepted and,
as in Go, leave TLS 1.3 as it is: only the older protocols' suites can be chosen, so a list of
TLS 1.3 suites alone leaves no TLS 1.2 suite, and only TLS 1.3 connects. A suite this Python's
OpenSSL lacks (RC4, 3DES in most builds) is left out; when nothing of the list is left the
secure port cannot start (:class:`TlsSettingsError`).
"""

from __future__ import annotations

import argparse
import ssl

VERSIONS: dict[str, ssl.TLSVersion] = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}
DEFAULT_VERSION = ssl.TLSVersion.TLSv1_2

#: Go's name of each suite --tls-cipher-suites takes, with OpenSSL's (``None``: a TLS 1.3 suite,
#: which neither Go nor OpenSSL lets a server list). Both ``..._CHACHA20_POLY1305`` spellings
#: are Go's (the short one is its legacy name).
CIPHER_SUITES: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
}


class TlsSettingsError(Exception):
    """The chosen suites leave nothing this OpenSSL can serve (one line, for the user)."""


def min_version(text: str) -> str:
    """``--tls-min-version``: one of :data:`VERSIONS`, or empty for the default."""
    if text and text not in VERSIONS:
        raise argparse.ArgumentTypeError(
            f"unknown tls version {text!r} (use one of {', '.join(VERSIONS)})"
        )
    return text


def cipher_suite(text: str) -> str:
    """One ``--tls-cipher-suites`` item, by Go's name."""
    if text not in CIPHER_SUITES:
        raise argparse.ArgumentTypeError(f"Cipher suite {text} not supported or doesn't exist")
    return text


def apply(context: ssl.SSLContext, version: str, suites: tuple[str, ...]) -> None:
    """Restrict ``context`` to ``version`` and up and, when ``suites`` are given, to them."""
    context.minimum_version = VERSIONS[version] if version else DEFAULT_VERSION
    if not suites:
        return
    openssl_names = sorted({name for suite in suites if (name := CIPHER_SUITES[suite])})
    if not openssl_names:
        # TLS 1.3 suites only: no older protocol has a suite left, as in Go.
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        return
    try:
        context.set_ciphers(":".join(openssl_names))
    except ssl.SSLError:
        raise TlsSettingsError(
            f"--tls-cipher-suites: none of {', '.join(suites)} is available in this Python's "
            f"OpenSSL ({ssl.OPENSSL_VERSION})"
        ) from None
