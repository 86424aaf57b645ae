"""The metadata server a GCE VM has, for the instance labelled ``polyccm-ccm-host=true``.

Served under ``/computeMetadata/v1/`` on the emulator's own port, so
``GCE_METADATA_HOST=127.0.0.1:PORT`` (and ``GCE_METADATA_IP`` for google-auth's probe of ``/``)
makes google-auth and any metadata client use it. As on GCE every request needs the header
``Metadata-Flavor: Google`` (403 without it) and every answer carries it. "The instance polyccm
runs on" is chosen through the API (label an instance ``polyccm-ccm-host: "true"``); without
one, the project and the service account still answer, and instance paths are 404 as they would
be off GCE.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Request, Response

from polyccm_gce_emulator.models import ComputeBackends, Resource, region_of

PREFIX = "/computeMetadata/v1/"
HOST_LABEL = "polyccm-ccm-host"
FLAVOR = {"Metadata-Flavor": "Google"}
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
TOKEN_PREFIX = "ya29.polyccm-emulator."


def numeric_project_id(project: str) -> str:
    """A stable project number for a project id."""
    return str(int(hashlib.sha256(project.encode()).hexdigest()[:10], 16))


def service_account(project: str) -> str:
    return f"polyccm-emulator@{project}.iam.gserviceaccount.com"


class MetadataServer:
    """Answers metadata requests from the emulator's models (which it reads under their
    lock); ``default_project`` is the project when no instance is the host."""

    def __init__(self, backends: ComputeBackends, default_project: Callable[[], str]) -> None:
        self._backends = backends
        self._default_project = default_project
        self.issued_tokens = 0

    def __call__(self, request: Request) -> Response:
        if request.path == "/":
            # google-auth's probe: is there a metadata server here?
            return self._text("computeMetadata/\n")
        if request.headers.get("Metadata-Flavor") != "Google":
            return Response(
                "Missing Metadata-Flavor:Google header.\n",
                status=403,
                headers=FLAVOR,
                content_type="text/plain",
            )
        path = request.path[len(PREFIX) :] if request.path.startswith(PREFIX) else None
        if path is None:
            return self._missing()
        with self._backends.lock:
            host = self._host()
            project = host.project if host is not None else self._default_project()
            value = self._lookup(path.rstrip("/"), project, host, request)
        if value is None:
            return self._missing()
        if isinstance(value, str):
            return self._text(value)
        return Response(json.dumps(value), headers=FLAVOR, content_type="application/json")

    def _host(self) -> Resource | None:
        for project in self._backends.projects():
            project.advance()
            for instance in sorted(project.every("instances"), key=lambda item: item.path):
                if instance.body.get("labels", {}).get(HOST_LABEL) == "true":
                    return instance
        return None

    def _lookup(
        self, path: str, project: str, host: Resource | None, request: Request
    ) -> str | dict[str, Any] | list[Any] | None:
        recursive = request.args.get("recursive", "").lower() == "true"
        account = {
            "aliases": ["default"],
            "email": service_account(project),
            "scopes": SCOPES,
        }
        fixed: dict[str, Any] = {
            "project/project-id": project,
            "project/numeric-project-id": numeric_project_id(project),
            "instance/service-accounts": "default/\n" + service_account(project) + "/\n",
            "instance/service-accounts/default/email": service_account(project),
            "instance/service-accounts/default/aliases": "default\n",
            "instance/service-accounts/default/scopes": "\n".join(SCOPES) + "\n",
        }
        if path == "instance/service-accounts/default" or path.endswith(
            "service-accounts/" + service_account(project)
        ):
            return account if recursive else "aliases\nemail\nidentity\nscopes\ntoken\n"
        if path.endswith("/token") and path.startswith("instance/service-accounts/"):
            self.issued_tokens += 1
            return {
                "access_token": TOKEN_PREFIX + secrets.token_urlsafe(24),
                "expires_in": 3599,
                "token_type": "Bearer",
            }
        if path in fixed:
            return str(fixed[path])
        if host is None or not path.startswith("instance"):
            return None
        return self._instance_value(path, project, host)

    @staticmethod
    def _instance_value(path: str, project: str, host: Resource) -> str | None:
        body = host.body
        zone = host.scope.removeprefix("zones/")
        number = numeric_project_id(project)
        values = {
            "instance/name": body["name"],
            "instance/id": body["id"],
            "instance/zone": f"projects/{number}/zones/{zone}",
            "instance/region": f"projects/{number}/regions/{region_of(zone)}",
            "instance/hostname": f"{body['name']}.{zone}.c.{project}.internal",
            "instance/machine-type": f"projects/{number}/machineTypes/"
            + str(body["machineType"]).rsplit("/", 1)[-1],
            "instance/tags": json.dumps(body.get("tags", {}).get("items", [])),
        }
        for index, nic in enumerate(body.get("networkInterfaces", [])):
            prefix = f"instance/network-interfaces/{index}"
            values[f"{prefix}/ip"] = nic["networkIP"]
            values[f"{prefix}/network"] = (
                f"projects/{number}/networks/" + str(nic["network"]).rsplit("/", 1)[-1]
            )
            for config_index, config in enumerate(nic.get("accessConfigs", [])):
                if config.get("natIP"):
                    values[f"{prefix}/access-configs/{config_index}/external-ip"] = config["natIP"]
        for item in body.get("metadata", {}).get("items", []):
            values[f"instance/attributes/{item['key']}"] = item["value"]
        return values.get(path)

    @staticmethod
    def _text(value: str) -> Response:
        return Response(value, headers=FLAVOR, content_type="application/text")

    @staticmethod
    def _missing() -> Response:
        return Response("Not Found\n", status=404, headers=FLAVOR, content_type="text/html")
