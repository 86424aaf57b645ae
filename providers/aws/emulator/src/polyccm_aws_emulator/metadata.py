"""The instance metadata service (IMDSv2) of "the machine polyccm runs on".

It describes the first live instance tagged ``polyccm.dev/ccm-host=true``, so that instance is
chosen through the cloud's own API (``RunInstances``/``CreateTags``): moto's own metadata would
name a fixed fake instance that does not exist. ``PUT /latest/api/token`` gives a token, then
``GET /latest/meta-data/...`` answers with it, and
``GET /latest/dynamic/instance-identity/document`` with the instance identity document (JSON),
where the AWS SDKs read the region. The primary
network interface is under ``meta-data/mac`` and ``meta-data/network/interfaces/macs/<mac>/``
(``vpc-id``, ``subnet-id``), as on EC2. Point boto3 here with
``AWS_EC2_METADATA_SERVICE_ENDPOINT``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

METADATA = "/latest/"
#: The tag that makes an instance the one the emulated instance metadata service describes.
CCM_HOST_TAG = "polyccm.dev/ccm-host"

StartResponse = Callable[..., Any]

#: What the emulated metadata service knows of one instance: path under ``meta-data/`` -> value.
HostMetadata = Mapping[str, str]
IDENTITY_DOCUMENT = "dynamic/instance-identity/document"
#: The account moto answers as (its default).
ACCOUNT_ID = "123456789012"


class InstanceMetadataService:
    """IMDSv2 for one instance, found anew on every request by ``find_host``.

    Tokens come from ``PUT /latest/api/token`` (which, as on EC2, needs the TTL header) and are
    required on every ``GET``; without a host instance every path answers 404, as a machine
    outside EC2 would leave the caller without an answer.
    """

    TOKEN_HEADER = "HTTP_X_AWS_EC2_METADATA_TOKEN"
    TTL_HEADER = "HTTP_X_AWS_EC2_METADATA_TOKEN_TTL_SECONDS"

    def __init__(self, find_host: Callable[[], HostMetadata | None]) -> None:
        self._find_host = find_host
        self._tokens: set[str] = set()
        self._lock = threading.Lock()

    def forget_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))[len(METADATA) :]
        method = str(environ.get("REQUEST_METHOD", "GET"))
        if path == "api/token":
            if method != "PUT":
                return text_answer(start_response, 405, "use PUT for a token")
            ttl = str(environ.get(self.TTL_HEADER) or "")
            if not ttl:
                return text_answer(start_response, 400, "missing token TTL header")
            token = uuid.uuid4().hex
            with self._lock:
                self._tokens.add(token)
            # EC2 echoes the TTL; the Go SDK refuses a token without it (aws-sdk-go-v2
            # feature/ec2/imds v1.16.31 api_op_GetToken.go:81-84) and falls back to IMDSv1.
            return text_answer(
                start_response, 200, token, [("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", ttl)]
            )
        with self._lock:
            authorised = environ.get(self.TOKEN_HEADER) in self._tokens
        if not authorised:
            return text_answer(start_response, 401, "a session token is required (IMDSv2)")
        host = self._find_host()
        if host is not None and path == IDENTITY_DOCUMENT:
            return text_answer(start_response, 200, identity_document(host))
        if host is None or not path.startswith("meta-data/"):
            return text_answer(start_response, 404, "not found")
        key = path[len("meta-data/") :].strip("/")
        if not key:
            return text_answer(start_response, 200, "\n".join(sorted(host)))
        value = host.get(key)
        if value is None:
            return text_answer(start_response, 404, "not found")
        return text_answer(start_response, 200, value)


def identity_document(host: HostMetadata) -> str:
    """The instance identity document, with the fields EC2 fills from what the host knows
    (aws-sdk-go-v2 feature/ec2/imds v1.16.31 api_op_GetInstanceIdentityDocument.go:94-110)."""
    return json.dumps(
        {
            "accountId": ACCOUNT_ID,
            "architecture": "x86_64",
            "availabilityZone": host.get("placement/availability-zone", ""),
            "imageId": host.get("ami-id", ""),
            "instanceId": host.get("instance-id", ""),
            "instanceType": host.get("instance-type", ""),
            "privateIp": host.get("local-ipv4", ""),
            "region": host.get("placement/region", ""),
            "version": "2017-09-30",
        },
        indent=2,
    )


def text_answer(
    start_response: StartResponse,
    status: int,
    body: str,
    headers: Iterable[tuple[str, str]] = (),
) -> Iterable[bytes]:
    data = body.encode()
    start_response(
        f"{status} {'OK' if status == 200 else 'Error'}",
        [("Content-Type", "text/plain"), ("Content-Length", str(len(data))), *headers],
    )
    return [data]


def find_ccm_host() -> HostMetadata | None:
    """The metadata of the first live instance tagged ``polyccm.dev/ccm-host=true``, searched
    in every account and region moto has state for; ``None`` when there is none."""
    from moto.ec2.models import ec2_backends

    for regions in list(ec2_backends.values()):
        for backend in list(regions.values()):
            for instance in backend.all_instances():
                if instance._state.name == "terminated":
                    continue
                tags = {t["key"]: t["value"] for t in instance.get_tags()}
                if tags.get(CCM_HOST_TAG) != "true":
                    continue
                zone = str(instance.placement.zone or "")
                found: dict[str, str] = {
                    "instance-id": str(instance.id),
                    "instance-type": str(instance.instance_type),
                    "placement/availability-zone": zone,
                    "placement/region": str(instance.region_name),
                    "local-ipv4": str(instance.private_ip or ""),
                    "local-hostname": str(instance.private_dns_name or ""),
                    "ami-id": str(instance.image_id or ""),
                }
                nic = instance.nics.get(0)
                if nic is not None:
                    mac = str(nic.mac_address)
                    found["mac"] = mac
                    found["network/interfaces/macs"] = f"{mac}/"
                    found[f"network/interfaces/macs/{mac}/vpc-id"] = str(nic.subnet.vpc_id)
                    found[f"network/interfaces/macs/{mac}/subnet-id"] = str(nic.subnet.id)
                return found
    return None
