"""The instance metadata service (IMDS) of the EC2 instance polyccm runs on.

cloud-provider-aws learns three things about its own machine here when nothing configures them:
the region (the instance identity document's ``region``), its instance id (whose tags may name
the cluster) and the VPC and subnet of its primary network interface. :class:`InstanceMetadata`
asks for them with one IMDSv2 session token, and answers ``None`` for anything it cannot get: off
EC2, with ``AWS_EC2_METADATA_DISABLED=true``, or for a path the service does not serve. Once the
service did not answer at all (no token, no path), it is not asked again: each attempt may wait
for its timeout.

botocore's IMDS fetcher does the HTTP, configured as boto3 configures it for credentials:
``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (the emulator's in tests), the endpoint mode, the timeout
and attempts (``AWS_METADATA_SERVICE_TIMEOUT``/``..._NUM_ATTEMPTS``, 1 s and 1 by default), an
IMDSv2 token with fallback to v1 unless v1 is disabled.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import botocore.session
from botocore.exceptions import BotoCoreError, InvalidIMDSEndpointError
from botocore.utils import IMDSFetcher, resolve_imds_endpoint_mode
from polyccm.errors import ConfigError

log = logging.getLogger(__name__)

#: Where the AWS SDK for Go v2 reads the region (``imds.GetRegion``): the identity document.
IDENTITY_DOCUMENT = "latest/dynamic/instance-identity/document"
META_DATA = "latest/meta-data/"


@dataclass(frozen=True)
class OwnNetwork:
    """The VPC and subnet of this instance's primary network interface."""

    vpc_id: str
    subnet_id: str


class InstanceMetadata:
    """Lookups on this machine's metadata service, sharing one session token."""

    def __init__(self) -> None:
        self._fetcher: Any = None
        self._token: str | None = None
        self._unreachable = False
        self._answered = False

    def _open(self) -> Any:
        if self._fetcher is None:
            session = botocore.session.get_session()
            config = {
                "ec2_metadata_service_endpoint": session.get_config_variable(
                    "ec2_metadata_service_endpoint"
                ),
                "ec2_metadata_service_endpoint_mode": resolve_imds_endpoint_mode(session),
                "ec2_metadata_v1_disabled": session.get_config_variable("ec2_metadata_v1_disabled"),
            }
            try:
                fetcher = IMDSFetcher(
                    timeout=session.get_config_variable("metadata_service_timeout"),
                    num_attempts=session.get_config_variable("metadata_service_num_attempts"),
                    config=config,
                    user_agent="polyccm",
                )
            except InvalidIMDSEndpointError as error:
                raise ConfigError(f"instance metadata service: {error}") from None
            # botocore has no public call for an arbitrary metadata path; its own fetchers
            # (region, credentials) are built on these two methods.
            self._token = fetcher._fetch_metadata_token()
            self._fetcher = fetcher
        return self._fetcher

    def get(self, path: str) -> str | None:
        """The text at ``path`` (under ``/``, e.g. ``latest/meta-data/instance-id``), or
        ``None``."""
        if self._unreachable:
            return None
        try:
            fetcher = self._open()
            response = fetcher._get_request(path, None, self._token)
        except (BotoCoreError, _retries_exceeded()) as error:
            log.debug("no instance metadata at %s: %s", path, error or type(error).__name__)
            # Without a token nor any answer so far, nothing listens: later paths would only
            # wait for their timeouts too.
            if self._token is None and not self._answered:
                self._unreachable = True
            return None
        self._answered = True
        text = str(response.text).strip()
        return text or None

    def instance_id(self) -> str | None:
        """This instance's id."""
        return self.get(META_DATA + "instance-id")

    def region(self) -> str | None:
        """The region of the identity document, where upstream's SDK reads it (aws-sdk-go-v2
        feature/ec2/imds v1.16.31 api_op_GetRegion.go:45-71)."""
        text = self.get(IDENTITY_DOCUMENT)
        if text is None:
            return None
        try:
            region = json.loads(text).get("region")
        except (ValueError, AttributeError):
            log.warning("the instance identity document is not a JSON object; region unknown")
            return None
        return str(region) if region else None

    def network(self) -> OwnNetwork | None:
        """The VPC and subnet of the primary interface (``mac``), or ``None``."""
        mac = self.get(META_DATA + "mac")
        if mac is None:
            return None
        base = f"{META_DATA}network/interfaces/macs/{mac}/"
        vpc_id = self.get(base + "vpc-id")
        if vpc_id is None:
            return None
        return OwnNetwork(vpc_id, self.get(base + "subnet-id") or "")


def _retries_exceeded() -> type[Exception]:
    error: type[Exception] = IMDSFetcher._RETRIES_EXCEEDED_ERROR_CLS
    return error


def own_instance_id() -> str | None:
    """The id of the EC2 instance this process runs on, or ``None`` when no instance metadata
    service answers (not on EC2, or ``AWS_EC2_METADATA_DISABLED=true``)."""
    return InstanceMetadata().instance_id()
