"""boto3 clients for one region, and the single place where AWS errors become polyccm errors.

Clients use botocore's ``standard`` retry mode: throttling (``RequestLimitExceeded``,
``Throttling``...) and 5xx answers are retried with jittered exponential backoff. What still fails
after the retries is raised as :class:`AwsApiError`, whose message names the service, operation,
error code and attempts, so a controller logs and re-queues it instead of crashing.

Endpoints: a ``[ServiceOverride]`` for the service and region wins (its URL, its
``SigningRegion`` and, when given, its ``SigningName``; ``SigningMethod`` is read and unused, as
upstream); otherwise boto3's own resolution applies, which honours ``AWS_ENDPOINT_URL`` (the
emulator sets it). Credentials come from the normal boto3 chain, optionally exchanged for
``RoleARN`` through STS.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import boto3
import botocore.session
from botocore.config import Config
from botocore.credentials import AssumeRoleCredentialFetcher, DeferredRefreshableCredentials
from botocore.exceptions import BotoCoreError, ClientError
from polyccm import cloudcalls, logredact, useragent
from polyccm.errors import CloudError, ConfigError

from polyccm_aws.config import CloudConfig
from polyccm_aws.provider_id import region_from_zone

log = logging.getLogger(__name__)

Response = dict[str, Any]
THROTTLING_CODES = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"}
)


class AwsApiError(CloudError):
    """An AWS call failed (after botocore's retries, for retryable errors)."""

    def __init__(self, service: str, operation: str, code: str, message: str, attempts: int):
        retried = f" after {attempts} attempts" if attempts > 1 else ""
        kind = " (throttled)" if code in THROTTLING_CODES else ""
        super().__init__(f"AWS {service} {operation} failed{retried}{kind}: {code}: {message}")
        self.service = service
        self.operation = operation
        self.code = code
        self.attempts = attempts

    @property
    def throttled(self) -> bool:
        return self.code in THROTTLING_CODES


def error_code(error: BaseException) -> str:
    """The AWS error code of ``error``, or ``""``."""
    return error.code if isinstance(error, AwsApiError) else ""


def resolve_region(
    config: CloudConfig, metadata_region: Callable[[], str | None] = lambda: None
) -> str:
    """The region of ``Zone``, else ``Region``, else boto3's default region (``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, the profile), else ``metadata_region()`` (this instance's, from
    the instance metadata service; asked only then).

    ``Zone`` wins over ``Region`` as upstream keeps it doing for old configs; upstream reads no
    region variable, which polyccm honours before asking the metadata service so that a start
    off EC2 stays as it was."""
    region = (
        region_from_zone(config.zone)
        or config.region
        or boto3.Session().region_name
        or metadata_region()
    )
    if not region:
        raise ConfigError(
            "no AWS region: set Region in [Global] of the cloud config or AWS_DEFAULT_REGION "
            "(the instance metadata service, which names it on EC2, did not answer)"
        )
    return str(region)


def _session(config: CloudConfig, region: str, client_config: Config) -> boto3.Session:
    if not config.role_arn:
        return boto3.Session(region_name=region)
    base = boto3.Session(region_name=region)
    source_arn = config.source_arn
    sts_override = config.endpoint_for("sts", region)

    def create_client(service_name: str, **kwargs: Any) -> Any:
        if sts_override is not None:
            kwargs["endpoint_url"] = sts_override.url
        kwargs.setdefault("config", client_config)
        client = base.client(service_name, **kwargs)
        count_calls(client)
        if source_arn:
            account = source_arn.split(":")[4] if source_arn.count(":") >= 5 else ""

            def add_headers(request: Any, **_: Any) -> None:
                request.headers["x-amz-source-arn"] = source_arn
                if account:
                    request.headers["x-amz-source-account"] = account

            client.meta.events.register("before-sign.sts.AssumeRole", add_headers)
        return client

    fetcher = AssumeRoleCredentialFetcher(
        client_creator=create_client,
        source_credentials=base.get_credentials(),
        role_arn=config.role_arn,
        extra_args={"RoleSessionName": "polyccm"},
    )

    def fetch_credentials() -> dict[str, Any]:
        # The session credentials are secrets: masked in the log from the moment they arrive.
        credentials: dict[str, Any] = fetcher.fetch_credentials()
        logredact.add_secret(credentials.get("secret_key"))
        logredact.add_secret(credentials.get("token"))
        return credentials

    core = botocore.session.get_session()
    # botocore offers no public setter for refreshable credentials; this is how boto3 users
    # plug an assume-role fetcher into a session.
    core._credentials = DeferredRefreshableCredentials(
        method="assume-role", refresh_using=fetch_credentials
    )
    return boto3.Session(botocore_session=core, region_name=region)


class AwsApi:
    """The EC2, ELB and ELBv2 clients of one region; every call goes through :meth:`call`."""

    def __init__(self, config: CloudConfig, region: str, *, max_attempts: int = 5) -> None:
        self.region = region
        self._config = config
        self._client_config = Config(
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=10,
            read_timeout=60,
            # As upstream adds kubernetes/<version> (cloud-provider-aws
            # pkg/providers/v1/aws_sdk.go:70 @63ec440), and which process calls.
            user_agent_extra=useragent.cloud_user_agent(),
            # botocore checks every parameter against the model before sending: a walk of
            # every member (RegisterTargets of 200 targets, a thousand instances to register)
            # that AWS repeats anyway. polyccm builds its requests from the model's shapes
            # and AWS refuses what it would have refused (an AwsApiError either way).
            parameter_validation=False,
            # Each service worker may have a load balancer's independent steps in flight at
            # once (polyccm_aws.together): room for them all, not botocore's 10 connections.
            max_pool_connections=32,
        )
        self._session = _session(config, region, self._client_config)
        # Timestamps stay the strings AWS sent: nothing here reads them, and parsing each one
        # with dateutil (LaunchTime, AttachTime... of every instance) cost more CPU than the
        # rest of a DescribeInstances answer.
        core = self._session._session
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        core.get_component("data_loader").file_loader = LeanModelLoader()
        self._clients: dict[str, Any] = {}

    def client(self, name: str) -> Any:
        """The boto3 client ``name`` (``ec2``, ``elb``, ``elbv2``), created on first use."""
        if name not in self._clients:
            override = self._config.endpoint_for(name, self.region)
            kwargs: dict[str, Any] = {"config": self._client_config}
            if override is not None:
                kwargs["endpoint_url"] = override.url
                kwargs["region_name"] = override.signing_region
            client = self._session.client(name, **kwargs)
            if override is not None and override.signing_name:
                sign_as(client, override.signing_name)
            encode_form_once(client)
            count_calls(client)
            self._clients[name] = client
        return self._clients[name]

    def call(self, service: str, operation: str, **params: Any) -> Response:
        """Call ``operation`` (snake_case) on ``service``; errors become AwsApiError."""
        client = self.client(service)
        try:
            result: Response = getattr(client, operation)(**params)
        except ClientError as error:
            raise _translate(client, service, operation, error) from error
        except BotoCoreError as error:
            raise AwsApiError(
                service, _api_name(client, operation), type(error).__name__, str(error), 1
            ) from error
        return result

    def pages(self, service: str, operation: str, **params: Any) -> Iterator[Response]:
        """Every page of a paginated ``operation``."""
        client = self.client(service)
        try:
            yield from client.get_paginator(operation).paginate(**params)
        except ClientError as error:
            raise _translate(client, service, operation, error) from error
        except BotoCoreError as error:
            raise AwsApiError(
                service, _api_name(client, operation), type(error).__name__, str(error), 1
            ) from error


class LeanModelLoader:
    """botocore's model-file loader (its ``JSONFileLoader``'s two methods), reading the JSON
    into plain dicts with the documentation strings emptied: EC2's model took 14 MiB as
    botocore's ordered dicts with documentation, 6.5 MiB this way. Nothing here reads the
    documentation (botocore only builds docstrings from it)."""

    SUFFIXES = (".json", ".json.gz")

    def exists(self, file_path: str) -> bool:
        return any(os.path.isfile(file_path + suffix) for suffix in self.SUFFIXES)

    def load_file(self, file_path: str) -> Any:
        for suffix in self.SUFFIXES:
            path = file_path + suffix
            if os.path.isfile(path):
                with gzip.open(path, "rb") if suffix.endswith(".gz") else open(path, "rb") as file:
                    text = file.read().decode("utf-8")
                return json.loads(text, object_pairs_hook=_no_docs)
        return None


def _no_docs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: "" if k == "documentation" and isinstance(v, str) else v for k, v in pairs}


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*", re.ASCII)
"""What ``urllib.parse.quote_plus`` leaves as it is."""


def form_body(params: Mapping[str, Any]) -> str:
    """``params`` form-encoded exactly as botocore encodes a query request's body
    (``AWSRequestPreparer._prepare_body``: each key and value as UTF-8, ``urlencode`` with
    ``doseq``), quoting only what needs it: most keys and values (``Targets.member.7.Id``,
    instance ids) need none, and ``quote_plus`` was most of the encoding's CPU."""
    parts: list[str] = []
    for key, value in params.items():
        if (
            isinstance(key, str)
            and _UNRESERVED.fullmatch(key)
            and (
                type(value) is int  # ports, counts: urlencode writes str(value)
                or (isinstance(value, str) and _UNRESERVED.fullmatch(value))
            )
        ):
            parts.append(f"{key}={value}")
        else:
            parts.append(urlencode([(_utf8(key), _utf8(value))], doseq=True))
    return "&".join(parts)


def _utf8(item: Any) -> Any:
    return item.encode("utf-8") if isinstance(item, str) else item


def encode_form_once(client: Any) -> None:
    """Encode each query request's body once, before it is signed. botocore keeps the body a
    dict until it is sent and encodes it each time it is read: once for the SigV4 payload hash
    and once more to send it (for RegisterTargets of 200 targets, 800 ``quote_plus`` calls
    each time). The bytes sent are the same (:func:`form_body`)."""

    def encode(request: Any, **_: Any) -> None:
        if isinstance(request.data, dict):
            request.data = form_body(request.data)

    client.meta.events.register("before-sign", encode)


def sign_as(client: Any, signing_name: str) -> None:
    """Sign every request of ``client`` (SigV4) for the service ``signing_name`` instead of its
    own, as upstream's ``[ServiceOverride] SigningName`` does (cloud-provider-aws v1.37.1
    config/config.go:206, :273, :324: the SDK's ``WithSigV4SigningName``, final over the
    endpoint's). botocore reads the name from the request's signing context after
    ``before-sign`` (signers.py ``RequestSigner.sign``)."""

    def rename(request: Any, **_: Any) -> None:
        request.context.setdefault("signing", {})["signing_name"] = signing_name

    client.meta.events.register("before-sign", rename)


_THROTTLED = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"}
)
"""Error codes that say the request rate was too high: upstream counts EC2's
``RequestLimitExceeded`` (cloud-provider-aws pkg/providers/v1/retry_handler.go, 63ec440c,
lines 190-193); ELB's and the others' throttling codes are counted alike."""


def count_calls(client: Any) -> None:
    """Pass every request ``client`` sends (retries included) through
    :func:`polyccm.cloudcalls.record`: it is counted by operation (``ec2:DescribeInstances``),
    and refused before it leaves once this process has lost leadership. Its end is recorded
    too: answered, failed (an error answer or none) and throttled (each attempt the cloud
    refused for the request rate), for upstream's ``cloudprovider_aws_api_*`` metrics."""
    service = client.meta.service_model.endpoint_prefix
    if service == "elasticloadbalancing":
        service = "elbv2" if client.meta.service_model.api_version == "2015-12-01" else "elb"

    def operation(event_name: str) -> str:
        return f"{service}:{event_name.rsplit('.', 1)[-1]}"

    def before_send(event_name: str, **_: Any) -> None:
        cloudcalls.record("aws", operation(event_name))

    def needs_retry(event_name: str, response: Any = None, **_: Any) -> None:
        if response is not None:
            code = (response[1] or {}).get("Error", {}).get("Code")
            if code in _THROTTLED:
                cloudcalls.record_throttled("aws", operation(event_name))

    def after_call(event_name: str, http_response: Any = None, **_: Any) -> None:
        if http_response is not None and http_response.status_code >= 300:
            cloudcalls.record_error("aws", operation(event_name))
        else:
            cloudcalls.record_answer("aws", operation(event_name))

    def after_call_error(event_name: str, **_: Any) -> None:
        cloudcalls.record_error("aws", operation(event_name))

    client.meta.events.register("before-send", before_send)
    client.meta.events.register("needs-retry", needs_retry)
    client.meta.events.register("after-call", after_call)
    client.meta.events.register("after-call-error", after_call_error)


def _api_name(client: Any, operation: str) -> str:
    mapping: dict[str, str] = client.meta.method_to_api_mapping
    return mapping.get(operation, operation)


def _translate(client: Any, service: str, operation: str, error: ClientError) -> AwsApiError:
    details = error.response.get("Error", {})
    metadata = error.response.get("ResponseMetadata", {})
    attempts = int(metadata.get("RetryAttempts", 0)) + 1
    return AwsApiError(
        service,
        _api_name(client, operation),
        str(details.get("Code", "Unknown")),
        str(details.get("Message", "")),
        attempts,
    )
