"""The node annotations the BGP speakers read, under the names an operator may choose.

Upstream's CCM lets each name be changed (``METAL_ANNOTATION_LOCAL_ASN``, ``_PEER_ASN``,
``_PEER_IP``, ``_SRC_IP``, ``_BGP_PASS``, ``_NETWORK_IPV4_PRIVATE``, or ``annotationLocalASN``...
in its JSON config; metal/config.go:153-163 at 38d15e2), for a speaker configured to read
others. A peer's names are templates whose first ``{{n}}`` is the peer's number (upstream's
``strings.Replace(..., 1)``). :class:`AnnotationNames` holds them, makes each peer's name and
recognises the names it makes on a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

#: Upstream's defaults (metal/constants.go:7-12 at 38d15e2).
DEFAULT_NODE_ASN = "metal.equinix.com/bgp-peers-{{n}}-node-asn"
DEFAULT_PEER_ASN = "metal.equinix.com/bgp-peers-{{n}}-peer-asn"
DEFAULT_PEER_IP = "metal.equinix.com/bgp-peers-{{n}}-peer-ip"
DEFAULT_SRC_IP = "metal.equinix.com/bgp-peers-{{n}}-src-ip"
DEFAULT_BGP_PASS = "metal.equinix.com/bgp-peers-{{n}}-bgp-pass"
DEFAULT_NETWORK = "metal.equinix.com/network-4-private"
#: The peer fields, as :meth:`AnnotationNames.peer` takes them.
PEER_FIELDS = ("node-asn", "peer-asn", "peer-ip", "src-ip", "bgp-pass")
#: Peers counted on a node at most (a template without ``{{n}}`` names one peer only).
MAX_PEERS = 64


@dataclass(frozen=True)
class AnnotationNames:
    """The names of the peer annotations (templates) and of the private-network one."""

    node_asn: str = DEFAULT_NODE_ASN
    peer_asn: str = DEFAULT_PEER_ASN
    peer_ip: str = DEFAULT_PEER_IP
    src_ip: str = DEFAULT_SRC_IP
    bgp_pass: str = DEFAULT_BGP_PASS
    network: str = DEFAULT_NETWORK

    def template(self, field: str) -> str:
        return {
            "node-asn": self.node_asn, "peer-asn": self.peer_asn, "peer-ip": self.peer_ip,
            "src-ip": self.src_ip, "bgp-pass": self.bgp_pass,
        }[field]  # fmt: skip

    def peer(self, field: str, n: int) -> str:
        """The name of peer ``n``'s ``field`` (one of :data:`PEER_FIELDS`)."""
        return self.template(field).replace("{{n}}", str(n), 1)

    @cached_property
    def _patterns(self) -> tuple[re.Pattern[str], ...]:
        return tuple(
            re.compile(re.escape(self.template(f)).replace(re.escape("{{n}}"), r"\d+", 1))
            for f in PEER_FIELDS
        )

    def is_peer(self, name: str) -> bool:
        """Whether ``name`` is a peer annotation these names make."""
        return any(pattern.fullmatch(name) for pattern in self._patterns)

    def peers_of(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """The peer annotations among ``annotations``."""
        return {k: v for k, v in annotations.items() if self.is_peer(k)}

    def count(self, annotations: Mapping[str, str]) -> int:
        """How many peers, numbered from 0, have a peer IP in ``annotations``."""
        n = 0
        while n < MAX_PEERS and self.peer("peer-ip", n) in annotations:
            if n and self.peer("peer-ip", n) == self.peer("peer-ip", 0):
                break  # no {{n}}: one name for every peer
            n += 1
        return n
