"""The compute API's own errors, as typed exceptions the HTTP layer renders in Google's format.

Every refusal the emulator makes is one of these, rendered as Google renders it::

    {"error": {"code": 404, "message": "The resource '...' was not found",
               "errors": [{"domain": "global", "reason": "notFound", "message": "..."}]}}

so a client's error handling (google-api-core maps the status to ``NotFound``, ``Conflict``,
``PreconditionFailed``, ``Forbidden``...) meets what it would meet on GCE. Failures that GCE
reports in a finished operation instead (``Operation.error``) are :class:`OperationFailure`.
"""

from __future__ import annotations

from typing import Any


class ComputeError(Exception):
    """A refusal answered synchronously, with its HTTP status, reason and domain."""

    status: int = 400
    reason: str = "invalid"
    domain: str = "global"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, Any]:
        """The JSON error body Google sends."""
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"domain": self.domain, "reason": self.reason, "message": self.message}],
            }
        }


class Invalid(ComputeError):
    """400: a field holds a value the API does not accept."""


class Required(ComputeError):
    """400: a required field is missing."""

    reason = "required"

    def __init__(self, field: str) -> None:
        super().__init__(f"Required field '{field}' not specified")


class BadRequest(ComputeError):
    """400: a malformed request (bad JSON, unknown field, bad page token)."""

    reason = "badRequest"


class ResourceInUse(ComputeError):
    """400: deleting a resource another resource still refers to."""

    reason = "resourceInUseByAnotherResource"


class ResourceNotReady(ComputeError):
    """400: the resource is busy with another operation."""

    reason = "resourceNotReady"


class Unauthenticated(ComputeError):
    status = 401
    reason = "required"

    def __init__(self) -> None:
        super().__init__(
            "Request is missing required authentication credential. Expected OAuth 2 access "
            "token, login cookie or other valid authentication credential."
        )


class NotFound(ComputeError):
    status = 404
    reason = "notFound"

    def __init__(self, path: str) -> None:
        super().__init__(f"The resource '{path}' was not found")


class MethodNotFound(ComputeError):
    """404 for a path no method serves (Google answers such requests with a plain 404)."""

    status = 404
    reason = "notFound"


class AlreadyExists(ComputeError):
    status = 409
    reason = "alreadyExists"

    def __init__(self, path: str) -> None:
        super().__init__(f"The resource '{path}' already exists")


class ConditionNotMet(ComputeError):
    """412: a fingerprint in the request no longer matches the resource."""

    status = 412
    reason = "conditionNotMet"


class RateLimitExceeded(ComputeError):
    status = 403
    reason = "rateLimitExceeded"
    domain = "usageLimits"

    def __init__(self, message: str = "Rate Limit Exceeded") -> None:
        super().__init__(message)


class QuotaExceeded(ComputeError):
    status = 403
    reason = "quotaExceeded"
    domain = "usageLimits"

    def __init__(self, metric: str, limit: int, scope: str = "globally") -> None:
        super().__init__(f"Quota '{metric}' exceeded.  Limit: {float(limit)} {scope}.")


class Injected(ComputeError):
    """Any status and reason, as a fault injected through the control API asked for."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.domain = (
            "usageLimits" if reason in ("rateLimitExceeded", "quotaExceeded") else "global"
        )


#: Status text Google puts in ``Operation.httpErrorMessage``.
HTTP_ERROR_MESSAGES = {
    400: "BAD REQUEST",
    403: "FORBIDDEN",
    404: "NOT FOUND",
    409: "CONFLICT",
    412: "PRECONDITION FAILED",
    429: "TOO MANY REQUESTS",
    500: "INTERNAL SERVER ERROR",
    503: "SERVICE UNAVAILABLE",
}


class OperationFailure(Exception):
    """A failure that surfaces in the finished operation's ``error``, not in the HTTP answer:
    ``code`` is Google's operation error code (``RESOURCE_NOT_FOUND``, ``QUOTA_EXCEEDED``...)."""

    def __init__(self, code: str, message: str, http_status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status
