"""The Metal API's errors as typed exceptions, rendered as its error bodies.

The Metal API answers a failure with ``{"errors": ["..."]}`` (the document's ``Error`` schema)
and the matching HTTP status; the emulator answers every failure that way, never a bare 500.
"""

from __future__ import annotations

from typing import ClassVar


class ApiError(Exception):
    status: ClassVar[int] = 500
    default_message: ClassVar[str] = "Internal Server Error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)

    def body(self) -> dict[str, list[str]]:
        return {"errors": [self.message]}


class BadRequest(ApiError):
    status = 400
    default_message = "Bad Request"


class Unauthorized(ApiError):
    status = 401
    default_message = "Invalid authentication token"


class Forbidden(ApiError):
    status = 403
    default_message = "You are not authorized to view this project"


class NotFound(ApiError):
    status = 404
    default_message = "Not found"


class Unprocessable(ApiError):
    status = 422
    default_message = "Unprocessable Entity"


class TooManyRequests(ApiError):
    status = 429
    default_message = "Too Many Requests"


class ServerError(ApiError):
    pass


class BadGateway(ApiError):
    status = 502
    default_message = "Bad Gateway"


class ServiceUnavailable(ApiError):
    status = 503
    default_message = "Service Unavailable"


class GatewayTimeout(ApiError):
    status = 504
    default_message = "Gateway Timeout"


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (BadRequest, Unauthorized, Forbidden, NotFound, Unprocessable, TooManyRequests,
                ServerError, BadGateway, ServiceUnavailable, GatewayTimeout)
}  # fmt: skip


def error_for_status(status: int, message: str | None = None) -> ApiError:
    """The error the Metal API answers with ``status`` (fault injection asks by status)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        raise ValueError(f"no Metal API error is known for HTTP {status}")
    return cls(message)
