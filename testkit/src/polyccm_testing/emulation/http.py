"""Steps of an emulated API request that do not depend on the cloud: routing on a werkzeug
``Map``, reading the JSON body, suffering an injected fault, and describing an answer that does
not match the document. The cloud's errors are passed in."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map
from werkzeug.wrappers import Request, Response

from polyccm_testing.emulation.faults import Fault
from polyccm_testing.emulation.openapi import Validators


def match(
    urls: Map, request: Request, not_found: Callable[[], Exception]
) -> tuple[Any, dict[str, str]]:
    """The endpoint ``urls`` routes ``request`` to and its path arguments (as text); the
    cloud's 404 (``not_found()``) for a path or method it does not route."""
    adapter = urls.bind_to_environ(request.environ)
    try:
        endpoint, args = adapter.match(request.path, method=request.method)
    except HTTPException:
        raise not_found() from None
    return endpoint, {key: str(value) for key, value in args.items()}


def json_body(request: Request, bad_request: Callable[[], Exception]) -> Any:
    """The request's JSON body (``None`` when empty); the cloud's 400 when it is not JSON."""
    if not request.get_data():
        return None
    try:
        return json.loads(request.get_data())
    except ValueError:
        raise bad_request() from None


def suffer(fault: Fault | None, error_for_status: Callable[[int, str | None], Exception]) -> None:
    """Wait the fault's latency, then raise the cloud's error for its status (if it has one)."""
    if fault is None:
        return
    if fault.latency:
        time.sleep(fault.latency)
    if fault.status is not None:
        raise error_for_status(fault.status, fault.message)


def mismatch(validators: Validators, request: Request, response: Response) -> dict[str, str] | None:
    """How ``response`` to ``request`` does not match the document (``request``, ``status``,
    ``problem``, as ``/_polyccm/validation`` lists them), or ``None`` when it matches."""
    problem = validators.response_problem(request, response)
    if problem is None:
        return None
    return {
        "request": f"{request.method} {request.path}",
        "status": str(response.status_code),
        "problem": problem,
    }
