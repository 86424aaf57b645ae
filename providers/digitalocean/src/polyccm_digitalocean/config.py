"""The provider's settings, read from the environment as upstream's CCM reads them.

DigitalOcean's CCM has no cloud-config file: everything comes from variables, so
:func:`read_environment` is a pure function of a mapping (``os.environ`` in production, a dict
in tests) and raises :class:`~polyccm.errors.ConfigError` with one line naming the variable at
fault. The token is registered with :mod:`polyccm.logredact` the moment it is read, so no log
line can show it. ``DO_ACCESS_TOKEN_FILE`` is read by :func:`polyccm.inputs.read_text` (at most
:data:`MAX_TOKEN_FILE_BYTES`); the URLs follow :mod:`polyccm.urls` (the API's: https, or plain
http to a loopback emulator); an echoed value is cut (:func:`polyccm.inputs.quoted`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from polyccm import inputs, logredact
from polyccm.errors import ConfigError
from polyccm.inputs import quoted
from polyccm.urls import plain_url, secret_url

from polyccm_digitalocean.annotations import DEFAULT_TYPE, DEFAULT_TYPES

DEFAULT_API_URL = "https://api.digitalocean.com"
#: The droplet metadata service (link-local, plain http, as DigitalOcean serves it).
DEFAULT_METADATA_URL = "http://169.254.169.254/metadata/v1/"
#: Requests per second when ``DO_API_RATE_LIMIT_QPS`` is unset: 4,500 an hour, under the
#: API's 5,000 per hour (and far under 250 per minute), leaving room for other clients.
DEFAULT_QPS = 1.25
#: Requests the limiter lets through at once after a quiet spell: with the 75 a minute it then
#: allows, 175 in any minute, under the API's 250 (a cluster's load balancers made, updated by a
#: node change and deleted within a minute, without waiting on the limiter).
DEFAULT_BURST = 100
#: The largest token file read: a DigitalOcean token is 71 characters.
MAX_TOKEN_FILE_BYTES = 64 << 10
#: Variables naming the CA bundle to verify the API with (requests' names, which pydo's
#: transport reads too).
CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_INNER_SPACE = re.compile(r"[\x00-\x20\x7f-\x9f]")


@dataclass(frozen=True)
class DigitalOceanConfig:
    """What the provider needs to reach DigitalOcean and know its cluster."""

    token: str
    """The API token (``DO_ACCESS_TOKEN``, or the file ``DO_ACCESS_TOKEN_FILE`` names)."""
    api_url: str = DEFAULT_API_URL
    """``DO_OVERRIDE_URL``: another API endpoint (an emulator); https only."""
    cluster_id: str = ""
    """``DO_CLUSTER_ID``: the DOKS cluster id (logged); ``polyccm orphans`` takes load balancers
    upstream tagged ``k8s:<id>`` for this cluster's."""
    vpc_id: str = ""
    """``DO_CLUSTER_VPC_ID``: the VPC new load balancers are placed in."""
    region: str = ""
    """``REGION``; empty means "ask the droplet metadata service"."""
    metadata_url: str = DEFAULT_METADATA_URL
    """``DO_METADATA_URL`` (polyccm's): the metadata service, overridable for tests."""
    qps: float = DEFAULT_QPS
    """``DO_API_RATE_LIMIT_QPS``: the client-side limit on requests per second."""
    burst: int = DEFAULT_BURST
    """Requests allowed at once before the limiter starts spacing them."""
    default_lb_type: str = DEFAULT_TYPE
    """``DEFAULT_LB_TYPE``: the type of a new load balancer whose Service has no ``type``
    annotation, ``REGIONAL_NETWORK`` (upstream's default since v0.1.61) or ``REGIONAL``."""
    firewall_name: str = ""
    """``PUBLIC_ACCESS_FIREWALL_NAME``: the firewall the ``firewall`` controller keeps open to
    the NodePort and REGIONAL_NETWORK Services' ports (empty: no firewall is managed)."""
    firewall_tags: tuple[str, ...] = ()
    """``PUBLIC_ACCESS_FIREWALL_TAGS``: the droplet tags that firewall applies to."""
    ca_bundle: str = ""
    """``REQUESTS_CA_BUNDLE`` (else ``CURL_CA_BUNDLE``): the CA file the API's certificate is
    verified with (a private CA, as the emulator's); empty means the system's."""
    metrics_addr: tuple[str, int] | None = None
    """``METRICS_ADDR``: where the manager serves ``/metrics`` over plain HTTP, as upstream."""
    debug_addr: tuple[str, int] | None = None
    """``DEBUG_ADDR``: where the manager serves upstream's ``/healthz`` (the API answers)."""

    def __repr__(self) -> str:  # the token stays out of any repr that reaches a log
        return (
            f"DigitalOceanConfig(api_url={self.api_url!r}, cluster_id={self.cluster_id!r}, "
            f"vpc_id={self.vpc_id!r}, region={self.region!r}, qps={self.qps}, "
            f"default_lb_type={self.default_lb_type!r})"
        )


def default_lb_type(environ: Mapping[str, str]) -> str:
    """``DEFAULT_LB_TYPE``: REGIONAL or REGIONAL_NETWORK (unset: REGIONAL_NETWORK);
    :class:`ConfigError` for anything else (upstream would fall back to REGIONAL_NETWORK
    silently)."""
    value = environ.get("DEFAULT_LB_TYPE", "").strip()
    if not value:
        return DEFAULT_TYPE
    if value not in DEFAULT_TYPES:
        raise ConfigError(f"DEFAULT_LB_TYPE must be {' or '.join(DEFAULT_TYPES)}: {quoted(value)}")
    return value


def listen_address(environ: Mapping[str, str], variable: str) -> tuple[str, int] | None:
    """``<host>:<port>`` in ``variable`` (``METRICS_ADDR``, ``DEBUG_ADDR``) as a host and port
    to bind, ``None`` when unset; :class:`ConfigError` without a port, as upstream's
    ``net.SplitHostPort`` refuses it (cloud.go:153-160@v0.1.68). An empty host is every
    address, as Go's listener reads it; ``[::1]:9090`` is an IPv6 host."""
    value = environ.get(variable, "").strip()
    if not value:
        return None
    host, colon, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        colon = ""  # an IPv6 address needs brackets, as SplitHostPort requires
    if not colon or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"{variable} must be <host>:<port> (for example 0.0.0.0:9090): {quoted(value)}"
        )
    return host, int(port)


def public_access_firewall(environ: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """``PUBLIC_ACCESS_FIREWALL_NAME`` and ``PUBLIC_ACCESS_FIREWALL_TAGS``: both or neither, as
    upstream requires (cloud.go:132-140@v0.1.68); the tags split on commas as upstream splits
    them."""
    name = environ.get("PUBLIC_ACCESS_FIREWALL_NAME", "").strip()
    tags = environ.get("PUBLIC_ACCESS_FIREWALL_TAGS", "").strip()
    if tags and not name:
        raise ConfigError(
            "PUBLIC_ACCESS_FIREWALL_NAME is required with PUBLIC_ACCESS_FIREWALL_TAGS"
        )
    if name and not tags:
        raise ConfigError(
            "PUBLIC_ACCESS_FIREWALL_TAGS is required with PUBLIC_ACCESS_FIREWALL_NAME"
        )
    return name, tuple(tags.split(",")) if tags else ()


def read_environment(environ: Mapping[str, str]) -> DigitalOceanConfig:
    """The settings in ``environ``; :class:`ConfigError` for a missing token, an unreadable
    token file, a non-https API URL, a QPS that is not a positive number, an unknown
    ``DEFAULT_LB_TYPE``, a firewall name without tags (or tags without a name), or a
    ``METRICS_ADDR``/``DEBUG_ADDR`` that is not ``<host>:<port>``."""
    metrics_addr = listen_address(environ, "METRICS_ADDR")
    debug_addr = listen_address(environ, "DEBUG_ADDR")
    firewall_name, firewall_tags = public_access_firewall(environ)
    token = environ.get("DO_ACCESS_TOKEN", "").strip()
    token_file = environ.get("DO_ACCESS_TOKEN_FILE", "").strip()
    if not token and token_file:
        token = read_token_file(token_file)
    if not token:
        raise ConfigError("DO_ACCESS_TOKEN (or DO_ACCESS_TOKEN_FILE) is required")
    logredact.add_secret(token)
    api_url = secret_url(
        environ.get("DO_OVERRIDE_URL", "").strip() or DEFAULT_API_URL, "DO_OVERRIDE_URL"
    )
    metadata_url = plain_url(
        environ.get("DO_METADATA_URL", "").strip() or DEFAULT_METADATA_URL, "DO_METADATA_URL"
    )
    qps_text = environ.get("DO_API_RATE_LIMIT_QPS", "").strip()
    qps, burst = DEFAULT_QPS, DEFAULT_BURST
    if qps_text:
        try:
            qps = float(qps_text)
        except ValueError:
            qps = 0.0
        if not (qps > 0 and math.isfinite(qps)):
            raise ConfigError(
                f"DO_API_RATE_LIMIT_QPS must be a positive number: {quoted(qps_text)}"
            )
        burst = max(1, min(DEFAULT_BURST, int(qps * 10)))
    return DigitalOceanConfig(
        token=token,
        api_url=api_url.rstrip("/"),
        cluster_id=environ.get("DO_CLUSTER_ID", "").strip(),
        vpc_id=environ.get("DO_CLUSTER_VPC_ID", "").strip(),
        region=environ.get("REGION", "").strip(),
        metadata_url=metadata_url,
        qps=qps,
        burst=burst,
        default_lb_type=default_lb_type(environ),
        firewall_name=firewall_name,
        firewall_tags=firewall_tags,
        ca_bundle=next(
            (environ[v].strip() for v in CA_BUNDLE_VARIABLES if environ.get(v, "").strip()), ""
        ),
        metrics_addr=metrics_addr,
        debug_addr=debug_addr,
    )


def read_token_file(path: str) -> str:
    """The token in the file ``DO_ACCESS_TOKEN_FILE`` names (blank around it dropped);
    :class:`ConfigError` when the file cannot be read, is larger than
    :data:`MAX_TOKEN_FILE_BYTES`, is not UTF-8, or holds more than one word. The token is never
    echoed."""
    token = inputs.read_text(
        path, what="token file (DO_ACCESS_TOKEN_FILE)", limit=MAX_TOKEN_FILE_BYTES
    ).strip()
    if _INNER_SPACE.search(token):
        raise ConfigError(
            "token file (DO_ACCESS_TOKEN_FILE) holds more than a token: it has spaces, line "
            "breaks or control characters inside",
            path=inputs.cut(path, 200),
        )
    return token
