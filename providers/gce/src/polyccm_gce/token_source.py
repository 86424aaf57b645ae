"""gce.conf's ``token-url`` and ``token-body``: where the provider's access token comes from,
as cloud-provider-gcp reads them (gce.go ``GenerateCloudConfig``, token_source.go).

* ``token-url = nil``, or no ``token-url``: application-default credentials (upstream: ``nil``
  means the default token source; without the key it asks the metadata server, which is what
  application-default credentials find on a GCE VM).
* any other ``token-url``: upstream's alternate token source. Each token is a ``POST`` of
  ``token-body`` to ``token-url``, authorised with the metadata server's token of the VM's
  default service account; the answer is JSON with ``accessToken`` and ``expireTime``
  (RFC 3339). A failure is a :class:`~google.auth.exceptions.RefreshError`, so the call that
  needed the token fails and is retried by its controller. The body is never logged.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

import google.auth.credentials
import requests
from google.auth.exceptions import RefreshError
from polyccm import logredact

#: A metadata server reader: a path's answer, or None (:func:`polyccm_gce.provider.metadata`).
MetadataReader = Callable[[str], "str | None"]


def _failure(message: str) -> RefreshError:
    return RefreshError(message)  # type: ignore[no-untyped-call]


def _metadata_token(metadata: MetadataReader) -> str:
    answer = metadata("instance/service-accounts/default/token")
    if not answer:
        raise _failure("no metadata server token to authorise the token-url request")
    try:
        return str(json.loads(answer)["access_token"])
    except (ValueError, KeyError, TypeError):
        raise _failure("the metadata server's token answer has no access_token") from None


def _expiry(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    # google-auth compares expiries with naive UTC times.
    return moment.astimezone(datetime.UTC).replace(tzinfo=None)


class AltTokenCredentials(google.auth.credentials.Credentials):
    """Tokens from ``token-url`` (upstream's ``AltTokenSource``)."""

    def __init__(
        self, url: str, body: str, metadata: MetadataReader, *, timeout: float = 10.0
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.metadata = metadata
        self.url = url
        self.body = body
        self.timeout = timeout

    def refresh(self, request: Any) -> None:
        bearer = _metadata_token(self.metadata)
        logredact.add_secret(bearer)
        try:
            answer = requests.post(
                self.url,
                data=self.body.encode(),
                headers={"Authorization": f"Bearer {bearer}"},
                timeout=self.timeout,
            )
        except requests.RequestException as error:
            raise _failure(f"token-url {self.url}: {type(error).__name__}") from None
        if answer.status_code >= 400:
            raise _failure(f"token-url {self.url} answered {answer.status_code}")
        try:
            token = answer.json()
            self.token = str(token["accessToken"])
        except (ValueError, KeyError, TypeError):
            raise _failure(f"token-url {self.url} answered no accessToken") from None
        logredact.add_secret(self.token)
        self.expiry = _expiry(token.get("expireTime"))


def credentials_for(
    token_url: str, token_body: str, metadata: MetadataReader
) -> AltTokenCredentials | None:
    """The alternate token source ``token-url`` names, or None for application-default
    credentials (no ``token-url``, or ``nil``)."""
    if not token_url or token_url == "nil":
        return None
    return AltTokenCredentials(token_url, token_body, metadata)
