"""What gce.conf's network keys name, resolved as cloud-provider-gcp resolves them (gce.go
``GenerateCloudConfig``, ``CreateGCECloud``, ``tryConvertToProjectNames``).

* ``network-name``: a name, or, when it holds a ``/``, the network's URL (full or
  ``projects/P/global/networks/N``); absent, the network of the VM's first interface from the
  metadata server (``instance/network-interfaces/0/network``, that is
  ``projects/<number>/networks/<name>``),
  never ``default``.
* ``subnetwork-name``: a name in the network project and the region, or a URL as above.
* ``project-id`` / ``network-project-id``: a project number is turned into the project's name
  with ``projects.get`` (a failure is a warning and the number is kept, as upstream).

URLs are rebuilt on the configured ``api-endpoint`` so that every one the provider sends or
compares has one form.
"""

from __future__ import annotations

import logging
import re

from polyccm.errors import ConfigError
from polyccm.inputs import quoted

from polyccm_gce.api import GceApi, GceApiError
from polyccm_gce.sdk import compute_v1

log = logging.getLogger(__name__)

METADATA_NETWORK = "instance/network-interfaces/0/network"
_NETWORK = re.compile(r"(?:.*/)?projects/([^/]+)/global/networks/([^/]+)/?")
_SUBNETWORK = re.compile(r"(?:.*/)?projects/([^/]+)/regions/([^/]+)/subnetworks/([^/]+)/?")


def network_from_metadata(answer: str | None) -> str:
    """The network name in the metadata server's answer for the first interface;
    :class:`ConfigError` when there is none (not on a GCE VM) or it has another shape."""
    if not answer:
        raise ConfigError(
            "no GCE network: set network-name in [global] of gce.conf (not on a GCE VM whose "
            "metadata server names one)"
        )
    parts = answer.split("/")
    if len(parts) != 4:  # as upstream's getNetworkNameViaMetadata
        raise ConfigError(f"the metadata server's network {quoted(answer)} is no network")
    return parts[3]


def network_url(endpoint: str, project: str, network: str) -> str:
    """The URL of gce.conf's ``network-name`` (a name in ``project``, or a URL)."""
    if "/" in network:
        match = _NETWORK.fullmatch(network)
        if match is None:
            raise ConfigError(
                f"network-name {quoted(network)} is neither a name nor a network's URL "
                "(projects/P/global/networks/N)"
            )
        project, network = match.groups()
    return f"{endpoint}projects/{project}/global/networks/{network}"


def subnetwork_url(endpoint: str, project: str, region: str, subnetwork: str) -> str:
    """The URL of gce.conf's ``subnetwork-name`` (a name in ``project`` and ``region``, or a
    URL)."""
    if "/" in subnetwork:
        match = _SUBNETWORK.fullmatch(subnetwork)
        if match is None:
            raise ConfigError(
                f"subnetwork-name {quoted(subnetwork)} is neither a name nor a subnetwork's "
                "URL (projects/P/regions/R/subnetworks/N)"
            )
        project, region, subnetwork = match.groups()
    return f"{endpoint}projects/{project}/regions/{region}/subnetworks/{subnetwork}"


def project_name(api: GceApi, project: str) -> str:
    """``project``, or the name of the project whose number it is (``projects.get``)."""
    if not project.isdigit():
        return project
    try:
        found = api.invoke(api.client(compute_v1.ProjectsClient).get, project=project)
    except GceApiError as error:
        log.warning("cannot read project %s to learn its name: %s", project, error)
        return project
    return str(found.name) or project
