"""The provider's settings, read as upstream's CCM reads them: a JSON file, then the environment.

cloud-provider-equinix-metal reads a JSON config (``--cloud-config``: ``apiKey``, ``projectID``,
``metro``, ``facility``, ``loadbalancer``, ``localASN``, ``bgpPass``, ``base-url``, ``eipTag``,
``apiServerPort``, ``bgpNodeSelector``, ``eipHealthCheckUseHostIP``, ``loadBalancerID``) and lets
each ``METAL_*`` variable override the matching key. ``emlb://`` and ``loadBalancerID`` name
Equinix Metal Load Balancers, which ended with the product: either stops the start.
:func:`read_config` is a pure function of that text and a mapping (``os.environ`` in
production, a dict in tests) and raises :class:`~polyccm.errors.ConfigError` with one line
naming the key at fault. The API key (and the
BGP password) are registered with :mod:`polyccm.logredact` the moment they are read, so no log
line can show them.

The file is read by :func:`polyccm.inputs.read_text` and :func:`polyccm.inputs.load_json` (so a
key given twice, or nesting past a hundred levels, stops the start). Its keys are matched as
upstream's ``json.Unmarshal`` matches them, ignoring case (``projectId`` is ``projectID``); two
spellings of one key are a key given twice. A value of the wrong JSON type (``apiKey`` a
number, ``projectID`` a list) stops the start, as it stops upstream's. A key polyccm does not
read is no error (``json.Unmarshal`` drops it silently): it is warned about, once, naming the
file and the key (:func:`polyccm.configkeys.warn_unknown_keys`); a file that is not a JSON
object stops the start.

``METAL_API_URL`` follows :func:`polyccm.urls.secret_url` (https, or plain http to a loopback
emulator: the API key is sent to it); ``METAL_LOAD_BALANCER`` is parsed here, once, as upstream
parses it. Echoed values are cut (:func:`polyccm.inputs.quoted`).
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, parse_qs, urlsplit

from polyccm import inputs, logredact
from polyccm.configkeys import warn_unknown_keys
from polyccm.errors import ConfigError
from polyccm.flagtypes import parse_bool
from polyccm.inputs import quoted
from polyccm.urls import plain_url, secret_url

from polyccm_packet.names import AnnotationNames
from polyccm_packet.selector import EVERYTHING, Selector, parse_selector

log = logging.getLogger(__name__)

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
#: The ConfigMap of ``metallb://`` when the URL names none (upstream's defaults).
DEFAULT_METALLB_TARGET = ("metallb-system", "config")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

#: The keys of the JSON file :func:`read_config` reads (``clusterID`` is polyccm's own), each
#: under its folded spelling (upstream's ``json.Unmarshal`` ignores case), with the JSON type
#: upstream's Config gives it.
FILE_KEYS: dict[str, tuple[str, type]] = {
    "apikey": ("apiKey", str), "projectid": ("projectID", str), "metro": ("metro", str),
    "facility": ("facility", str), "loadbalancer": ("loadbalancer", str),
    "localasn": ("localASN", int), "bgppass": ("bgpPass", str), "base-url": ("base-url", str),
    "clusterid": ("clusterID", str), "eiptag": ("eipTag", str),
    "apiserverport": ("apiServerPort", int), "bgpnodeselector": ("bgpNodeSelector", str),
    "eiphealthcheckusehostip": ("eipHealthCheckUseHostIP", bool),
    "loadbalancerid": ("loadBalancerID", str),
    "annotationlocalasn": ("annotationLocalASN", str),
    "annotationpeerasn": ("annotationPeerASN", str), "annotationpeerip": ("annotationPeerIP", str),
    "annotationsrcip": ("annotationSrcIP", str), "annotationbgppass": ("annotationBGPPass", str),
    "annotationnetworkipv4private": ("annotationNetworkIPv4Private", str),
    "annotationeipmetro": ("annotationEIPMetro", str),
    "annotationeipfacility": ("annotationEIPFacility", str),
}  # fmt: skip
#: The other keys of upstream's Config (metal/config.go), folded: read there, not here.
UNUSED_FILE_KEYS = frozenset(key.lower() for key in (
    "useCRDForMetalLB",
))  # fmt: skip
#: What polyccm says of Equinix Metal Load Balancers (``emlb://``, ``loadBalancerID``).
EMLB_GONE = (
    "Equinix Metal Load Balancers (emlb) ended with Equinix Metal on 2026-06-30; use "
    "metallb://, kube-vip:// or empty:// (Elastic IPs over BGP)"
)


DEFAULT_NAMES = AnnotationNames()
#: Upstream's Service annotations for a new Elastic IP's place (metal/constants.go:13-14).
DEFAULT_EIP_METRO = "metal.equinix.com/eip-metro"
DEFAULT_EIP_FACILITY = "metal.equinix.com/eip-facility"
#: Each annotation name's variable and key (upstream's, metal/config.go:153-163 at 38d15e2).
ANNOTATION_SETTINGS = {
    "node_asn": ("METAL_ANNOTATION_LOCAL_ASN", "annotationLocalASN"),
    "peer_asn": ("METAL_ANNOTATION_PEER_ASN", "annotationPeerASN"),
    "peer_ip": ("METAL_ANNOTATION_PEER_IP", "annotationPeerIP"),
    "src_ip": ("METAL_ANNOTATION_SRC_IP", "annotationSrcIP"),
    "bgp_pass": ("METAL_ANNOTATION_BGP_PASS", "annotationBGPPass"),
    "network": ("METAL_ANNOTATION_NETWORK_IPV4_PRIVATE", "annotationNetworkIPv4Private"),
}


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
    ``empty://`` (Elastic IPs, BGP sessions and peer annotations, no speaker configured);
    empty means load balancing is off, as upstream: no Elastic IP for any Service."""
    local_asn: int = DEFAULT_LOCAL_ASN
    """``METAL_LOCAL_ASN`` or ``localASN``: the cluster's ASN for BGP."""
    bgp_pass: str = ""
    """``METAL_BGP_PASS`` or ``bgpPass``: the MD5 password of the BGP sessions, if any."""
    api_url: str = DEFAULT_API_URL
    """``METAL_API_URL`` or ``base-url``: another Metal-compatible API (an emulator)."""
    metadata_url: str = DEFAULT_METADATA_URL
    """``METAL_METADATA_URL``: the device metadata service's root."""
    cluster_id: str = ""
    """``METAL_CLUSTER_ID`` or ``clusterID`` (polyccm's own): the id in the Elastic IPs'
    ``cluster=`` tag in place of the ``kube-system`` UID (:mod:`polyccm_packet.identity`)."""
    eip_tag: str = ""
    """``METAL_EIP_TAG`` or ``eipTag``: the tag of the control plane's Elastic IP (cluster-api's
    template passes it); empty: no control-plane Elastic IP is managed."""
    api_server_port: int = 0
    """``METAL_API_SERVER_PORT`` or ``apiServerPort``: the kube-apiserver's port behind that
    Elastic IP (0: the port the API server itself publishes)."""
    bgp_node_selector: Selector = EVERYTHING
    """``METAL_BGP_NODE_SELECTOR`` or ``bgpNodeSelector``: the nodes given BGP sessions and peer
    annotations (every node when empty)."""
    eip_health_check_use_host_ip: bool = False
    """``METAL_EIP_HEALTH_CHECK_USE_HOST_IP`` or ``eipHealthCheckUseHostIP``: health-check a
    control-plane node at its own address rather than through the Elastic IP."""
    annotation_names: AnnotationNames = DEFAULT_NAMES
    """``METAL_ANNOTATION_*`` or ``annotation*``: the names of the nodes' BGP annotations."""
    eip_annotations: tuple[str, str] = (DEFAULT_EIP_METRO, DEFAULT_EIP_FACILITY)
    """``METAL_ANNOTATION_EIP_METRO``/``_FACILITY`` or ``annotationEIP*``: the names of the
    Service annotations choosing where a new Elastic IP goes."""
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    debug: bool = False
    """``PACKNGO_DEBUG`` set (to anything, even empty, as upstream's ``os.LookupEnv``): every
    Metal request and answer is logged at INFO, credentials masked (:mod:`polyccm.logredact`)."""

    def __repr__(self) -> str:  # the key and the password stay out of any repr in a log
        return (
            f"MetalConfig(project_id={self.project_id!r}, metro={self.metro!r}, "
            f"facility={self.facility!r}, load_balancer={self.load_balancer!r}, "
            f"local_asn={self.local_asn}, api_url={self.api_url!r})"
        )

    @property
    def metallb_crds(self) -> bool:
        """``?crdConfiguration=true`` on a ``metallb://`` URL: MetalLB's ``metallb.io``
        objects, not its ConfigMap (upstream's flag and default)."""
        return crd_configuration(_split_load_balancer(self.load_balancer))

    @property
    def metallb_target(self) -> tuple[str, str] | None:
        """``(namespace, configmap)`` of a ``metallb:///ns/name`` mode, else ``None``."""
        if not self.load_balancer.startswith("metallb://"):
            return None
        return metallb_target(_split_load_balancer(self.load_balancer))


def metallb_target(parts: SplitResult) -> tuple[str, str]:
    """``(namespace, configmap)`` of a ``metallb://`` URL, read as upstream reads it: one
    slash dropped at each end of the path, the rest cut at its first slash, an empty part
    defaulted (``metallb:///`` is ``metallb-system/config``)."""
    path = parts.path.removeprefix("/").removesuffix("/")
    namespace, _, name = path.partition("/")
    return (namespace or DEFAULT_METALLB_TARGET[0], name or DEFAULT_METALLB_TARGET[1])


#: The words Go's strconv.ParseBool takes, as upstream parses ``crdConfiguration``.
_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def crd_configuration(parts: SplitResult) -> bool:
    """The ``crdConfiguration`` flag of a ``metallb://`` URL's query (false when absent, as
    upstream's metallb.go:92-99 at 38d15e2); :class:`ConfigError` for a value that is no Go
    boolean (upstream panics)."""
    values = parse_qs(parts.query, keep_blank_values=True).get("crdConfiguration")
    if values is None:
        return False
    if values[0] not in _GO_BOOLS:
        raise ConfigError(
            f"METAL_LOAD_BALANCER: crdConfiguration must be true or false, not {quoted(values[0])}"
        )
    return _GO_BOOLS[values[0]]


def _split_load_balancer(value: str) -> SplitResult:
    try:
        return urlsplit(value)
    except ValueError as error:
        raise ConfigError(f"METAL_LOAD_BALANCER {quoted(value)} is no URL: {error}") from None


def check_load_balancer(value: str) -> str:
    """``value`` when it names a mode polyccm implements (empty: none); :class:`ConfigError`
    otherwise. For ``metallb://``, the namespace and ConfigMap must be names Kubernetes takes;
    a host or a query, which upstream ignores, is ignored too, with a warning."""
    if not value:
        return value
    if value.startswith("emlb://"):
        raise ConfigError(f"METAL_LOAD_BALANCER {quoted(value)}: {EMLB_GONE}")
    if not value.startswith(LOAD_BALANCER_SCHEMES):
        raise ConfigError(
            f"METAL_LOAD_BALANCER must start with {', '.join(LOAD_BALANCER_SCHEMES)}: "
            f"{quoted(value)}"
        )
    parts = _split_load_balancer(value)
    if parts.scheme != "metallb":
        return value
    namespace, name = metallb_target(parts)
    if len(namespace) > 63 or not _DNS1123_LABEL.fullmatch(namespace):
        raise ConfigError(
            f"METAL_LOAD_BALANCER {quoted(value)}: {quoted(namespace)} is no namespace name "
            "(lower-case letters, digits and '-', at most 63)"
        )
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise ConfigError(
            f"METAL_LOAD_BALANCER {quoted(value)}: {quoted(name)} is no ConfigMap name "
            "(lower-case letters, digits, '-' and '.', at most 253)"
        )
    if parts.netloc:
        log.warning(
            "METAL_LOAD_BALANCER %s: the host %s is ignored, as upstream ignores it, and the "
            "ConfigMap is %s/%s; write metallb:///<namespace>/<name>, with three slashes",
            quoted(value), quoted(parts.netloc), namespace, name,
        )  # fmt: skip
    crd_configuration(parts)
    others = sorted(set(parse_qs(parts.query, keep_blank_values=True)) - {"crdConfiguration"})
    if others or parts.fragment:
        log.warning(
            "METAL_LOAD_BALANCER %s: %s ignored, as upstream ignores it (only crdConfiguration "
            "is read)", quoted(value), quoted(", ".join(others) or "#" + parts.fragment),
        )  # fmt: skip
    return value


def load_config_keys(cloud_config: str | Path | None) -> dict[str, object]:
    """The keys of the ``--cloud-config`` file (none without one), under polyccm's spelling,
    each key polyccm does not read warned about; :class:`ConfigError` for a file that cannot be
    read or is no JSON object, a key given twice or a value of the wrong type."""
    if not cloud_config:
        return {}
    source = inputs.cut(str(cloud_config), 200)
    text = inputs.read_text(cloud_config, what="cloud config")
    return parse_config_file(text, source=source)


def parse_config_file(text: str, *, source: str = "cloud config") -> dict[str, object]:
    """The keys of upstream's JSON config in ``text`` (read from ``source``), under polyccm's
    spelling, ``null`` ones left out; the others warned about. :class:`ConfigError` for
    anything but a JSON object, a key given twice (in any case) or a value of the wrong type."""
    parsed = inputs.load_json(text, source) if text.strip() else {}
    if not isinstance(parsed, dict):
        raise ConfigError("must be a JSON object", path=source)
    keys: dict[str, object] = {}
    written: dict[str, str] = {}
    for key, value in parsed.items():
        folded = key.lower()
        if folded in written:  # json.Unmarshal would keep the last: a key given twice
            raise ConfigError(
                f"{quoted(written[folded])} and {quoted(key)} are one key given twice "
                "(upstream matches keys ignoring case)",
                path=source,
            )
        written[folded] = key
        if folded not in FILE_KEYS or value is None:  # null leaves a Go field as it was
            continue
        name, kind = FILE_KEYS[folded]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            wanted = {str: "a string", int: "an integer", bool: "true or false"}[kind]
            raise ConfigError(
                f"{quoted(key)} must be {wanted}, not {_json_kind(value)}", path=source
            )
        keys[name] = value
    warn_unknown_keys(
        source, "", [(key, None) for key in parsed], FILE_KEYS, fold=str.lower,
        unused=UNUSED_FILE_KEYS,
    )  # fmt: skip
    return keys


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def read_config(
    environ: Mapping[str, str], file_keys: Mapping[str, object] | None = None
) -> MetalConfig:
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
        # ASCII digits, at most ten of them, before int(): a 5 MB number is not parsed
        if not (asn_text.isascii() and asn_text.isdigit() and len(asn_text) <= 10) or not (
            0 < int(asn_text) < 2**32
        ):
            raise ConfigError(f"METAL_LOCAL_ASN must be an AS number: {quoted(asn_text)}")
        local_asn = int(asn_text)
    api_url = pick(("METAL_API_URL",), "base-url") or DEFAULT_API_URL
    secret_url(api_url, "METAL_API_URL (base-url)")
    metadata_url = plain_url(
        environ.get("METAL_METADATA_URL", "").strip() or DEFAULT_METADATA_URL,
        "METAL_METADATA_URL",
    )
    load_balancer = check_load_balancer(pick(("METAL_LOAD_BALANCER",), "loadbalancer"))
    metro, facility = placement(environ, keys)
    if pick(("METAL_LOAD_BALANCER_ID",), "loadBalancerID"):
        raise ConfigError(f"METAL_LOAD_BALANCER_ID (loadBalancerID) is set: {EMLB_GONE}")
    return MetalConfig(
        api_key=api_key,
        project_id=project_id,
        metro=metro,
        facility=facility,
        load_balancer=load_balancer,
        local_asn=local_asn,
        bgp_pass=bgp_pass,
        api_url=api_url.rstrip("/"),
        metadata_url=metadata_url,
        cluster_id=pick(("METAL_CLUSTER_ID",), "clusterID"),
        eip_tag=pick(("METAL_EIP_TAG",), "eipTag"),
        api_server_port=_api_server_port(pick(("METAL_API_SERVER_PORT",), "apiServerPort")),
        bgp_node_selector=parse_selector(pick(("METAL_BGP_NODE_SELECTOR",), "bgpNodeSelector")),
        eip_health_check_use_host_ip=_use_host_ip(environ, keys),
        eip_annotations=eip_annotations(environ, keys),
        annotation_names=AnnotationNames(
            **{
                field: pick((variable,), key) or getattr(DEFAULT_NAMES, field)
                for field, (variable, key) in ANNOTATION_SETTINGS.items()
            }
        ),
        # Upstream's checkDebugEnabled (cloud.go ~158): set at all, whatever its value.
        debug="PACKNGO_DEBUG" in environ,
    )


def _api_server_port(text: str) -> int:
    """The port, as upstream's ``strconv.Atoi`` reads it, within the ports TCP has."""
    if not text:
        return 0
    if not (re.fullmatch(r"[+-]?\d{1,6}", text) and 0 <= int(text) <= 65535):
        raise ConfigError(f"METAL_API_SERVER_PORT must be a port number: {quoted(text)}")
    return int(text)


def _use_host_ip(environ: Mapping[str, str], keys: Mapping[str, object]) -> bool:
    """``METAL_EIP_HEALTH_CHECK_USE_HOST_IP`` as Go's ``strconv.ParseBool`` reads it, else the
    file's ``eipHealthCheckUseHostIP``."""
    text = environ.get("METAL_EIP_HEALTH_CHECK_USE_HOST_IP", "")
    if not text:
        return keys.get("eipHealthCheckUseHostIP") is True
    try:
        return parse_bool(text)
    except argparse.ArgumentTypeError:
        raise ConfigError(
            f"METAL_EIP_HEALTH_CHECK_USE_HOST_IP must be true or false: {quoted(text)}"
        ) from None


def placement(environ: Mapping[str, str], file_keys: Mapping[str, object]) -> tuple[str, str]:
    """``(metro, facility)``: where Elastic IPs are reserved, as :func:`read_config` reads them
    (and ``polyccm check-service`` too, which needs neither key nor project)."""
    return (
        _pick(environ, file_keys, ("METAL_METRO", "METAL_METRO_NAME"), "metro"),
        _pick(environ, file_keys, ("METAL_FACILITY", "METAL_FACILITY_NAME"), "facility"),
    )


def eip_annotations(environ: Mapping[str, str], file_keys: Mapping[str, object]) -> tuple[str, str]:
    """The names of the Service annotations for a new Elastic IP's metro and facility
    (upstream's unless renamed, metal/config.go:165-167 at 38d15e2), as :func:`read_config`
    reads them (``polyccm check-service`` too)."""
    return (
        _pick(environ, file_keys, ("METAL_ANNOTATION_EIP_METRO",), "annotationEIPMetro")
        or DEFAULT_EIP_METRO,
        _pick(environ, file_keys, ("METAL_ANNOTATION_EIP_FACILITY",), "annotationEIPFacility")
        or DEFAULT_EIP_FACILITY,
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
