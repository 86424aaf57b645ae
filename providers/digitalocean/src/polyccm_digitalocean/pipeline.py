"""pydo's client, its azure-core pipeline configured to the provider's budget.

Imported by :func:`polyccm_digitalocean.api.make_client` at the first call only (it imports
pydo). The pipeline is pydo's own, with these policies set:

* retry (:class:`BudgetRetryPolicy`): a connection failure, 408 or 5xx of GET/PUT/DELETE is
  resent a few times with a short backoff; a 429 never (the caller waits for ``ratelimit-reset``)
  nor a POST (azure-core would resend a create answered 503, which may have been made);
* below it, for every attempt (:class:`BudgetPolicy`): the limiter and
  :func:`polyccm.cloudcalls.record` of the :class:`~polyccm_digitalocean.api.DigitalOceanApi`
  that called, then :func:`polyccm.cloudcalls.record_error` when the attempt fails;
* authentication (:class:`BearerPolicy`): the token as a bearer header. azure-core's bearer
  policy refuses plain http, which the settings allow for a loopback emulator only;
* no redirects (the token must not follow one) and no per-request log lines (the call counter
  and polyccm's own logs say what was called).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from azure.core.exceptions import AzureError
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import (
    HTTPPolicy,
    RedirectPolicy,
    RetryPolicy,
    SansIOHTTPPolicy,
)
from azure.core.pipeline.transport import RequestsTransport
from polyccm import cloudcalls, useragent
from pydo import Client

from polyccm_digitalocean.api import CALL_OPTION, PROVIDER

if TYPE_CHECKING:
    from polyccm_digitalocean.api import DigitalOceanApi
    from polyccm_digitalocean.config import DigitalOceanConfig

#: Where the option is kept once taken from the options (each retry reads it again).
_CALL_KEY = "polyccm_call"


class BudgetRetryPolicy(RetryPolicy[Any, Any]):
    """azure-core's retries without a 429 and without resending a POST or PATCH."""

    # 408 and the 5xx a retry can cure; azure-core's list also holds 429.
    _RETRY_CODES = {408, 500, 502, 503, 504}

    def _is_method_retryable(self, settings: Any, request: Any, response: Any = None) -> bool:
        # azure-core resends a POST answered 500/503/504; a create may have been made by then.
        return bool(request.method.upper() in settings["methods"])


class BudgetPolicy(HTTPPolicy[Any, Any]):
    """Each attempt waits for the calling api's limiter and is counted (and fenced)."""

    def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        context = request.context
        if CALL_OPTION in context.options:
            context[_CALL_KEY] = context.options.pop(CALL_OPTION)
        call: tuple[str, DigitalOceanApi] | None = context.get(_CALL_KEY)
        if call is None:
            return self.next.send(request)
        operation, api = call
        api.spend(operation)
        try:
            response = self.next.send(request)
        except AzureError:
            cloudcalls.record_error(PROVIDER, operation)
            raise
        if response.http_response.status_code >= 400:
            cloudcalls.record_error(PROVIDER, operation)
        else:
            cloudcalls.record_answer(PROVIDER, operation)
        return response


class BearerPolicy(SansIOHTTPPolicy[Any, Any]):
    """The API token as ``Authorization: Bearer``."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._header = f"Bearer {token}"

    def on_request(self, request: PipelineRequest[Any]) -> None:
        request.http_request.headers["Authorization"] = self._header


def build_client(
    config: DigitalOceanConfig,
    connect_timeout: float,
    read_timeout: float,
    retries: int,
    within: float,
) -> Client:
    """pydo's client for ``config``'s endpoint, token and CA bundle."""
    transport = RequestsTransport(
        connection_verify=config.ca_bundle or True,
        connection_timeout=connect_timeout,
        read_timeout=read_timeout,
    )
    return Client(
        config.token,
        endpoint=config.api_url,
        transport=transport,
        retry_policy=BudgetRetryPolicy(
            retry_total=retries,
            retry_connect=retries,
            retry_read=retries,
            retry_status=retries,
            retry_backoff_factor=0.5,
            retry_backoff_max=4,
            timeout=within,
        ),
        authentication_policy=BearerPolicy(config.token),
        redirect_policy=RedirectPolicy.no_redirects(),
        http_logging_policy=SansIOHTTPPolicy[Any, Any](),
        # Runs after the retry policy (custom_hook_policy's place): once per attempt.
        custom_hook_policy=BudgetPolicy(),
        # As upstream names itself to godo (digitalocean-cloud-controller-manager
        # cloud-controller-manager/do/cloud.go:100 @70d527e), and which process calls.
        user_agent=useragent.cloud_user_agent(),
    )
