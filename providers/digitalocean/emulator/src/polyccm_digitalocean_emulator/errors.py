"""DigitalOcean's API errors as typed exceptions, rendered as its error bodies.

Every failure the emulator answers is one of these, shaped as DigitalOcean shapes them:
``{"id": "not_found", "message": "..."}`` with the matching HTTP status. Where DigitalOcean's
own wording is known (404, 401, 429, the droplet-create 422s), it is used word for word.
"""

from __future__ import annotations

from typing import ClassVar


class ApiError(Exception):
    """An error answer: ``status`` and ``error_id`` say what kind, ``message`` says why."""

    status: ClassVar[int] = 500
    error_id: ClassVar[str] = "server_error"
    default_message: ClassVar[str] = "Unexpected server-side error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)

    def body(self) -> dict[str, str]:
        return {"id": self.error_id, "message": self.message}


class BadRequest(ApiError):
    status = 400
    error_id = "bad_request"
    default_message = "Your request body was malformed."


class Unauthorized(ApiError):
    status = 401
    error_id = "unauthorized"
    default_message = "Unable to authenticate you."


class Forbidden(ApiError):
    status = 403
    error_id = "forbidden"
    default_message = "You do not have access for the attempted action."


class NotFound(ApiError):
    status = 404
    error_id = "not_found"
    default_message = "The resource you were accessing could not be found."


class Conflict(ApiError):
    status = 409
    error_id = "conflict"
    default_message = "The request conflicts with the current state of the resource."


class Unprocessable(ApiError):
    status = 422
    error_id = "unprocessable_entity"
    default_message = "The request could not be processed."


class TooManyRequests(ApiError):
    status = 429
    error_id = "too_many_requests"
    default_message = "API Rate limit exceeded."


class ServerError(ApiError):
    pass


class BadGateway(ApiError):
    status = 502
    error_id = "bad_gateway"
    default_message = "Bad gateway."


class ServiceUnavailable(ApiError):
    status = 503
    error_id = "service_unavailable"
    default_message = "The service is temporarily unavailable."


class GatewayTimeout(ApiError):
    status = 504
    error_id = "gateway_timeout"
    default_message = "The request timed out."


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        Unprocessable,
        TooManyRequests,
        ServerError,
        BadGateway,
        ServiceUnavailable,
        GatewayTimeout,
    )
}


def error_for_status(status: int, message: str | None = None) -> ApiError:
    """The error DigitalOcean answers with ``status`` (fault injection asks by status)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        raise ValueError(f"no DigitalOcean error is known for HTTP {status}")
    return cls(message)
