"""cloud-provider-gcp's own command-line flags that polyccm's GCE provider accepts under
upstream's names (cmd/cloud-controller-manager/main.go@v36.3.8), so a command line written for
upstream starts polyccm (no SDK import here: the plugin adds them for every ``--provider gce``).

* ``--enable-l4-deny-firewall``: each external load balancer gets the deny firewall
  ``k8s-fw-<lb>-deny`` (every protocol from anywhere to the rule's address, priority 1000) and
  its allow firewalls ``k8s-fw-<lb>`` and health-check ones at priority 999, as upstream
  (gce_loadbalancer_external.go:48-50, 302-307, 1230-1295@v36.3.8). Upstream refuses it without
  the next flag (main.go:228-229); so does polyccm, with one line (exit 2).
* ``--enable-l4-deny-firewall-rollback-cleanup``: without the first flag, each ensure deletes
  the load balancer's deny firewall, as upstream (gce_loadbalancer_external.go:217-223). (The
  deny firewall goes with the load balancer in any case: its address may go to someone else.)
* The ``nodeipam controller`` flag set (cmd/cloud-controller-manager/options/
  nodeipamcontroller.go:34-44): ``--service-cluster-ip-range`` (its families give the pod
  CIDRs' stack, :mod:`polyccm_gce.nodeipam_settings`), ``--node-cidr-mask-size*`` (checked as
  upstream checks them; CloudAllocator does not use them), ``--enable-multi-subnet-cluster``
  and ``--enable-multi-networking`` (GKE's, refused when true).
"""

from __future__ import annotations

import argparse

from polyccm.errors import ConfigError

DENY = "--enable-l4-deny-firewall"
DENY_CLEANUP = "--enable-l4-deny-firewall-rollback-cleanup"


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def _mask(value: str) -> int:
    try:
        return int(value, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int32 value {value!r}") from None


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--service-cluster-ip-range",
        default="",
        metavar="CIDRS",
        help="the Services' CIDR, or one per family (IPv4,IPv6 or IPv6,IPv4): nodeipam gives "
        "each node pod CIDRs of these families, in this order (default IPv4 only)",
    )
    for suffix in ("", "-ipv4", "-ipv6"):
        group.add_argument(
            f"--node-cidr-mask-size{suffix}",
            type=_mask,
            default=0,
            metavar="N",
            help="checked as upstream checks it; CloudAllocator takes the alias range's size",
        )
    for name in ("--enable-multi-subnet-cluster", "--enable-multi-networking"):
        group.add_argument(
            name,
            type=_bool,
            nargs="?",
            const=True,
            default=False,
            metavar="BOOL",
            help="GKE's multi-network IPAM: refused when true (default false)",
        )
    for name, dest, help_text in (
        (
            DENY,
            "enable_l4_deny_firewall",
            "make a deny firewall k8s-fw-<lb>-deny per external load balancer (needs "
            f"{DENY_CLEANUP})",
        ),
        (
            DENY_CLEANUP,
            "enable_l4_deny_firewall_rollback_cleanup",
            "delete each load balancer's deny firewall k8s-fw-<lb>-deny when syncing it",
        ),
    ):
        group.add_argument(
            name,
            dest=dest,
            type=_bool,
            nargs="?",
            const=True,
            default=False,
            metavar="BOOL",
            help=f"{help_text} (default false)",
        )


def deny_flags(options: argparse.Namespace) -> tuple[bool, bool]:
    """(make deny firewalls, clean them up), as the two flags ask; :class:`ConfigError` for
    the first without the second, as upstream refuses it (main.go:228-229@v36.3.8)."""
    deny = bool(getattr(options, "enable_l4_deny_firewall", False))
    cleanup = bool(getattr(options, "enable_l4_deny_firewall_rollback_cleanup", False))
    if deny and not cleanup:
        raise ConfigError(f"{DENY} requires {DENY_CLEANUP} to be true")
    return deny, cleanup
