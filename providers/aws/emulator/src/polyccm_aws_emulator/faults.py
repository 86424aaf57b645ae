"""Fault injection: the next N calls of an action fail with an AWS error code.

A :class:`Fault` is posted to ``/_polyccm/faults`` as JSON (``{"action": "DescribeInstances",
"count": 2, "code": "RequestLimitExceeded"}``); ``code`` may also be ``Throttling``,
``ServiceUnavailable`` (HTTP 503) or ``InternalError`` (HTTP 500), any other code with a
``status``; ``action`` ``*`` matches every call, ``service`` (``ec2``, ``elb``, ``elbv2``)
narrows it; ``after`` lets that many matching calls through first and ``writes_only`` matches
no read (``Describe*``, ``Get*``, ``List*``), so that a test can fail "the k-th write from now".
:func:`error_body` is the answer in the service's own XML error shape.
"""

from __future__ import annotations

from dataclasses import dataclass

STATUS_BY_CODE = {
    "RequestLimitExceeded": 503,
    "Throttling": 400,
    "ThrottlingException": 400,
    "ServiceUnavailable": 503,
    "InternalError": 500,
}


READ_ACTIONS = ("Describe", "Get", "List")
"""How the actions that only read begin."""


@dataclass
class Fault:
    """Fail the next ``count`` calls of ``action`` (optionally only for ``service``)."""

    action: str
    count: int = 1
    code: str = "RequestLimitExceeded"
    status: int | None = None
    service: str | None = None
    after: int = 0
    """Matching calls to let through, unharmed, before the first one that fails."""
    writes_only: bool = False
    """Match only actions that change something (not ``Describe*``, ``Get*``, ``List*``)."""

    def matches(self, action: str, service: str) -> bool:
        return (
            self.count > 0
            and self.action in ("*", action)
            and self.service in (None, service)
            and not (self.writes_only and action.startswith(READ_ACTIONS))
        )


def error_body(service: str, code: str, message: str) -> bytes:
    if service == "ec2":
        return (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
            f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>polyccm-fault</RequestID></Response>"
        ).encode()
    return (
        "<ErrorResponse><Error><Type>Sender</Type>"
        f"<Code>{code}</Code><Message>{message}</Message></Error>"
        "<RequestId>polyccm-fault</RequestId></ErrorResponse>"
    ).encode()
