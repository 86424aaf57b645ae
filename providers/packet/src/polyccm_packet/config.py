"""The provider's settings, read as upstream's CCM reads them: a JSON file, then the environment.

cloud-provider-equinix-metal reads a JSON config (``--cloud-config``: ``apiKey``, ``projectID``,
``metro``, ``facility``, ``loadbalancer``, ``localASN``, ``bgpPass``, ``base-url``) and lets each
``METAL_*`` variable override the matching key. :func:`read_config` is a pure function of that
text and a mapping (``os.environ`` in production, a dict in tests) and raises
:class:`~polyccm.errors.ConfigError` with one line naming the key at fault. The API key (and the
BGP password) are registered with :mod:`polyccm.logredact` the moment they are read, so no log
line can show them.

A key of the file polyccm does not read is no error (upstream's ``json.Unmarshal`` drops it
silently): it is warned about, once, naming the file and the key
(:func:`polyccm.configkeys.warn_unknown_keys`); a file that is not a JSON object stops the start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from polyccm import logredact
from polyccm.configkeys import warn_unknown_keys
from polyccm.errors import ConfigError

DEFAULT_API_URL = "https://api.equinix.com/metal/v1"
#: The device metadata service (``metadata.packet.net`` before the rename).
DEFAULT_METADATA_URL = "https://metadata.platformequinix.com"
#: The project's BGP ASN when neither ``METAL_LOCAL_ASN`` nor ``localASN`` says (upstream's).
DEFAULT_LOCAL_ASN = 65000
#: Metal's side of every BGP session (the ASN of its routers).
DEFAULT_PEER_ASN = 65530
#: Requests per second and burst of the client-side limiter: Metal documents no hard budget
#: (upstream's CCM sets none); this keeps a large cluster's node and load-balancer bursts from
#: starving other API users of the project. Background calls (BGP) have a pace of their own and
#: hold back while this one is in use (:meth:`MetalClient.spare_call`).
DEFAULT_QPS = 20.0
DEFAULT_BURST = 40

#: Metal's rule for a BGP MD5 password (the API document's pattern).
_MD5_PASSWORD = re.compile(r"^(?=.*[a-z])(?=.*[A-Z])(?=.*\d)[a-zA-Z\d]{10,20}$")

LOAD_BALANCER_SCHEMES = ("metallb://", "kube-vip://", "empty://")

#: The keys of the JSON file :func:`read_config` reads (``clusterID`` is polyccm's own).
FILE_KEYS = frozenset({
    "apiKey", "projectID", "projectId", "metro", "facility", "loadbalancer", "loadBalancer",
    "localASN", "bgpPass", "base-url", "clusterID",
})  # fmt: skip
#: The other keys of upstream's Config (metal/config.go): read there, not implemented here.
UNUSED_FILE_KEYS = frozenset({
    "annotationLocalASN", "annotationPeerASN", "annotationPeerIP", "annotationSrcIP",
    "annotationBGPPass", "annotationNetworkIPv4Private", "annotationEIPMetro",
    "annotationEIPFacility", "eipTag", "apiServerPort", "bgpNodeSelector",
    "eipHealthCheckUseHostIP", "useCRDForMetalLB",
})  # fmt: skip


@dataclass(frozen=True)
class MetalConfig:
    """What the provider needs to reach Metal and know its cluster."""

    api_key: str
    """``METAL_API_KEY`` (``PACKET_AUTH_TOKEN`` accepted), or ``apiKey``."""
    project_id: str
    """``METAL_PROJECT_ID`` or ``projectID``: the project the cluster's devices live in."""
    metro: str = ""
    """``METAL_METRO`` (``METAL_METRO_NAME``) or ``metro``: where Elastic IPs are reserved."""
    facility: str = ""
    """``METAL_FACILITY`` or ``facility``: the older placement, used when no metro is given."""
    load_balancer: str = ""
    """``METAL_LOAD_BALANCER`` or ``loadbalancer``: ``metallb:///ns/name``, ``kube-vip://``,
    ``empty://``; empty means no announcing (Elastic IPs are still reserved)."""
    local_asn: int = DEFAULT_LOCAL_ASN
    """``METAL_LOCAL_ASN`` or ``localASN``: the cluster's ASN for BGP."""
    bgp_pass: str = ""
    """``METAL_BGP_PASS`` or ``bgpPass``: the MD5 password of the BGP sessions, if any."""
    api_url: str = DEFAULT_API_URL
    """``METAL_API_URL`` or ``base-url``: another Metal-compatible API (an emulator)."""
    metadata_url: str = DEFAULT_METADATA_URL
    """``METAL_METADATA_URL``: the device metadata service's root."""
    cluster_id: str = ""
    """The cluster's id in the Elastic IPs' ``cluster=`` tag (``--cluster-name`` by default)."""
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST

    def __repr__(self) -> str:  # the key and the password stay out of any repr in a log
        return (
            f"MetalConfig(project_id={self.project_id!r}, metro={self.metro!r}, "
            f"facility={self.facility!r}, load_balancer={self.load_balancer!r}, "
            f"local_asn={self.local_asn}, api_url={self.api_url!r})"
        )

    @property
    def metallb_target(self) -> tuple[str, str] | None:
        """``(namespace, configmap)`` of a ``metallb:///ns/name`` mode, else ``None``."""
        if not self.load_balancer.startswith("metallb://"):
            return None
        path = urlsplit(self.load_balancer).path.strip("/")
        namespace, _, name = path.partition("/")
        return (namespace or "metallb-system", name or "config")


def load_config_keys(cloud_config: str | Path | None) -> dict[str, object]:
    """The keys of the ``--cloud-config`` file (none without one), each key polyccm does not
    read warned about; :class:`ConfigError` for a file that cannot be read or is no JSON
    object."""
    if not cloud_config:
        return {}
    try:
        text = Path(cloud_config).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"--cloud-config {cloud_config}: {error.strerror}") from None
    keys = parse_config_file(text, source=str(cloud_config))
    warn_unknown_keys(
        str(cloud_config), "", [(key, None) for key in keys], FILE_KEYS, unused=UNUSED_FILE_KEYS
    )
    return keys


def parse_config_file(text: str, *, source: str = "cloud config") -> dict[str, object]:
    """The keys of upstream's JSON config; :class:`ConfigError` for anything but an object."""
    try:
        parsed = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as error:
        raise ConfigError(f"not JSON: {error.msg}", path=source, line=error.lineno) from None
    if not isinstance(parsed, dict):
        raise ConfigError("must be a JSON object", path=source)
    return parsed


def read_config(
    environ: Mapping[str, str], file_keys: Mapping[str, object] | None = None, *,
    cluster_name: str = "kubernetes",
) -> MetalConfig:  # fmt: skip
    """The settings from ``file_keys`` (the parsed ``--cloud-config``) overridden by
    ``environ``; :class:`ConfigError` naming the key for a missing key or project, a bad ASN,
    an unknown load-balancer mode or a non-http(s) base URL."""
    keys = file_keys or {}

    def pick(variables: tuple[str, ...], *names: str) -> str:
        return _pick(environ, keys, variables, *names)

    api_key = pick(("METAL_API_KEY", "PACKET_AUTH_TOKEN"), "apiKey")
    if not api_key:
        raise ConfigError("METAL_API_KEY (or PACKET_AUTH_TOKEN, or apiKey) is required")
    # Both secrets are known before any other setting is read: an error about another one
    # that echoes its value (a secret pasted in the wrong variable) is masked.
    logredact.add_secret(api_key)
    bgp_pass = pick(("METAL_BGP_PASS",), "bgpPass")
    logredact.add_secret(bgp_pass)
    project_id = pick(("METAL_PROJECT_ID",), "projectID", "projectId")
    if not project_id:
        raise ConfigError("METAL_PROJECT_ID (or projectID) is required")
    if bgp_pass and not _MD5_PASSWORD.match(bgp_pass):  # Metal refuses any other; not echoed
        raise ConfigError(
            "METAL_BGP_PASS must be 10 to 20 letters and digits, with an upper-case letter, "
            "a lower-case letter and a digit (Metal's rule for BGP MD5 passwords)"
        )
    asn_text = pick(("METAL_LOCAL_ASN",), "localASN")
    local_asn = DEFAULT_LOCAL_ASN
    if asn_text:
        if not asn_text.isdigit() or not 0 < int(asn_text) < 2**32:
            raise ConfigError(f"METAL_LOCAL_ASN must be an AS number: {asn_text!r}")
        local_asn = int(asn_text)
    load_balancer = pick(("METAL_LOAD_BALANCER",), "loadbalancer", "loadBalancer")
    if load_balancer and not load_balancer.startswith(LOAD_BALANCER_SCHEMES):
        raise ConfigError(
            f"METAL_LOAD_BALANCER must start with {', '.join(LOAD_BALANCER_SCHEMES)}: "
            f"{load_balancer!r}"
        )
    api_url = pick(("METAL_API_URL",), "base-url") or DEFAULT_API_URL
    if urlsplit(api_url).scheme not in ("http", "https") or not urlsplit(api_url).netloc:
        raise ConfigError(f"METAL_API_URL (base-url) must be an http(s) URL: {api_url!r}")
    metro, facility = placement(environ, keys)
    return MetalConfig(
        api_key=api_key,
        project_id=project_id,
        metro=metro,
        facility=facility,
        load_balancer=load_balancer,
        local_asn=local_asn,
        bgp_pass=bgp_pass,
        api_url=api_url.rstrip("/"),
        metadata_url=(environ.get("METAL_METADATA_URL", "").strip() or DEFAULT_METADATA_URL),
        cluster_id=pick(("METAL_CLUSTER_ID",), "clusterID") or cluster_name,
    )


def placement(environ: Mapping[str, str], file_keys: Mapping[str, object]) -> tuple[str, str]:
    """``(metro, facility)``: where Elastic IPs are reserved, as :func:`read_config` reads them
    (and ``polyccm check-service`` too, which needs neither key nor project)."""
    return (
        _pick(environ, file_keys, ("METAL_METRO", "METAL_METRO_NAME"), "metro"),
        _pick(environ, file_keys, ("METAL_FACILITY", "METAL_FACILITY_NAME"), "facility"),
    )


def _pick(
    environ: Mapping[str, str], keys: Mapping[str, object], variables: tuple[str, ...], *names: str
) -> str:
    """The first of ``variables`` set in ``environ``, else the first of ``names`` in ``keys``."""
    for variable in variables:
        value = environ.get(variable, "").strip()
        if value:
            return value
    for name in names:
        found = keys.get(name)
        if found not in (None, ""):
            return str(found).strip()
    return ""
