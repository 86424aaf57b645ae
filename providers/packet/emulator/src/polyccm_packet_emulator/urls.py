"""The routing table: which handler serves which method and path of the API.

Paths are the OpenAPI document's templates under the API's base path ``/metal/v1``, operations
its ``operationId``s; the tests check that this table and the document's operations are the same
set.
"""

from __future__ import annotations

from dataclasses import dataclass

from werkzeug.routing import Map, Rule

from polyccm_packet_emulator import responses as r
from polyccm_packet_emulator.responses import BASE_PATH


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    """The OpenAPI path template (``/devices/{id}``), relative to :data:`BASE_PATH`."""
    operation: str
    """The OpenAPI ``operationId``: how calls are counted and faults are aimed."""
    handler: r.Handler


ROUTES: tuple[Route, ...] = (
    Route("GET", "/projects/{id}", "findProjectById", r.find_project),
    Route("GET", "/locations/metros", "findMetros", r.find_metros),
    Route("GET", "/locations/metros/{id}", "getMetro", r.get_metro),
    Route("GET", "/projects/{id}/devices", "findProjectDevices", r.find_project_devices),
    Route("POST", "/projects/{id}/devices", "createDevice", r.create_device),
    Route("GET", "/devices/{id}", "findDeviceById", r.find_device),
    Route("DELETE", "/devices/{id}", "deleteDevice", r.delete_device),
    Route("POST", "/devices/{id}/actions", "performAction", r.perform_action),
    Route("GET", "/devices/{id}/metadata", "findDeviceMetadataByID", r.find_device_metadata),
    Route("POST", "/devices/{id}/ips", "createIPAssignment", r.create_ip_assignment),
    Route("GET", "/projects/{id}/ips", "findIPReservations", r.find_ip_reservations),
    Route("POST", "/projects/{id}/ips", "requestIPReservation", r.request_ip_reservation),
    Route("GET", "/ips/{id}", "findIPAddressById", r.find_ip_address),
    Route("DELETE", "/ips/{id}", "deleteIPAddress", r.delete_ip_address),
    Route("GET", "/projects/{id}/bgp-config", "findBgpConfigByProject", r.find_bgp_config),
    Route("POST", "/projects/{id}/bgp-configs", "requestBgpConfig", r.request_bgp_config),
    Route("GET", "/devices/{id}/bgp/sessions", "findBgpSessions", r.find_bgp_sessions),
    Route("POST", "/devices/{id}/bgp/sessions", "createBgpSession", r.create_bgp_session),
    Route("GET", "/bgp/sessions/{id}", "findBgpSessionById", r.find_bgp_session),
    Route("DELETE", "/bgp/sessions/{id}", "deleteBgpSession", r.delete_bgp_session),
    Route("GET", "/devices/{id}/bgp/neighbors", "getBgpNeighborData", r.get_bgp_neighbor_data),
)


def url_map() -> Map:
    rules = []
    for route in ROUTES:
        rule = BASE_PATH + route.template.replace("{", "<").replace("}", ">")
        rules.append(Rule(rule, methods=[route.method], endpoint=route))
    return Map(rules, strict_slashes=False)
