"""Who this process is, to the API server and to the cloud: its leader-election identity, and
the User-Agent every cloud SDK of a provider sends.

:data:`IDENTITY` is made as upstream makes a cloud-controller-manager's leader-election
identity: the host name, ``_``, a fresh UUID (kubernetes/cloud-provider
app/controllermanager.go:236-241 @4666611). It is the Lease's ``holderIdentity`` while this
process leads, and it names the process in the User-Agent of its cloud calls
(:func:`cloud_user_agent`): ``polyccm/<version> polyccm-identity/<identity>``. Upstream's CCMs
name only themselves there (``Kubernetes/<version> (<os> <arch>)``, cloud-provider-gcp
providers/gce/gce.go:580; ``digitalocean-cloud-controller-manager/<version>``,
digitalocean-cloud-controller-manager do/cloud.go:100; ``cloud-provider-equinix-metal/<version>``,
cloud-provider-equinix-metal metal/cloud.go:64); with the identity too, a cloud's audit log
(CloudTrail's ``userAgent``, GCP's ``callerSuppliedUserAgent``) tells which replica made a call,
and that it was the one holding the Lease. :func:`caller_of` reads the identity back from a
User-Agent (the emulators' call logs use it).
"""

from __future__ import annotations

import socket
import uuid

IDENTITY = f"{socket.gethostname()}_{uuid.uuid4()}"
"""This process's leader-election identity: ``<host name>_<UUID>``."""
PRODUCT = "polyccm"
IDENTITY_PRODUCT = "polyccm-identity"
"""The User-Agent product whose "version" is :data:`IDENTITY`."""


def cloud_user_agent() -> str:
    """The User-Agent (or the part of it the SDK lets us add) of this process's cloud calls:
    ``polyccm/<version> polyccm-identity/<identity>``."""
    from polyccm.version import version

    return f"{PRODUCT}/{version()} {IDENTITY_PRODUCT}/{IDENTITY}"


def caller_of(user_agent: str) -> str | None:
    """The identity a User-Agent names with :data:`IDENTITY_PRODUCT`, if it names one."""
    prefix = f"{IDENTITY_PRODUCT}/"
    for part in user_agent.split():
        if part.startswith(prefix) and len(part) > len(prefix):
            return part[len(prefix) :]
    return None
