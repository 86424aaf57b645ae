"""How the emulator receives a request: patches of moto's HTTP request handler (connections kept
open), of its request parsing and dispatch, and of the backend work each request repeats, so
that a call costs less CPU to take in and dispatch while moto parses it into the same
parameters and answers it with the same bytes.

:func:`receive_requests_cheaply` installs them all (idempotently); ``build_app`` calls it. Each
patch keeps moto's own function as ``__wrapped__``, so tests can put moto's code back and
compare."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Mapping
from typing import Any

#: Where a structure shape keeps what :func:`parse_structures_by_a_plan` worked out about it,
#: one plan per parser class.
_PLANS = "_polyccm_query_plans"

# What a member's value is read as: a string or other text value as it stands, an integer.
_TEXT, _INTEGER, _OTHER = 0, 1, 2


def _first_values(values: Any) -> dict[str, Any]:
    """What ``values.get`` answers for each name of werkzeug's (combined) multi-dict: read
    from the lists a ``MultiDict`` keeps, the dicts of a ``CombinedMultiDict`` from the last
    (so that an earlier one's value wins); any other mapping through its ``items``."""
    from werkzeug.datastructures import CombinedMultiDict, ImmutableMultiDict, MultiDict

    plain = (MultiDict, ImmutableMultiDict)
    parts = values.dicts if type(values) is CombinedMultiDict else [values]
    if not all(type(part) in plain for part in parts):
        return dict(values.items())
    first: dict[str, Any] = {}
    for part in reversed(parts):
        first.update({name: kept[0] for name, kept in dict.items(part) if kept})
    return first


def parse_query_values_from_a_dict() -> None:
    """Read a query-protocol request's parameters from a plain dict of each name's first value,
    not from werkzeug's ``CombinedMultiDict`` of the query string and the form.

    moto's query parser asks that mapping for every member of every structure it might find
    (five lookups per target of a RegisterTargets, a thousand for 200 targets), and each
    lookup of a ``CombinedMultiDict`` is a Python loop over its dicts. The dict holds what
    ``get`` would answer for every name, in the same order (a name of the query string before
    the form's, each name's first value), so every parse comes out as moto's."""
    from moto.core.parse import QueryParser

    original: Callable[..., Any] = QueryParser._do_parse
    if getattr(original, "polyccm_dict", False):
        return

    @functools.wraps(original)
    def do_parse(self: Any, request_dict: Mapping[str, Any], shape: Any) -> Any:
        values = request_dict["values"]
        if type(values) is not dict:
            request_dict = {**request_dict, "values": _first_values(values)}
        return original(self, request_dict, shape)

    do_parse.polyccm_dict = True  # type: ignore[attr-defined]
    QueryParser._do_parse = do_parse  # type: ignore[method-assign]


def _plan(parser: Any, shape: Any) -> list[tuple[str, str, Any, int, Any]]:
    """For each member of ``shape``, in moto's order: the key it is parsed into, its name in
    the request, its shape, how its value is read (:data:`_TEXT` or :data:`_INTEGER` when
    moto's handler for it is the query parser's own plain read, else :data:`_OTHER`) and the
    default moto reads when it is absent."""
    from moto.core.parse import UNDEFINED, QueryParser

    kind = type(parser)
    plans: dict[type, list[tuple[str, str, Any, int, Any]]] = shape.__dict__.setdefault(_PLANS, {})
    plan = plans.get(kind)
    if plan is not None:
        return plan
    plain_read = (
        kind._default_handle is QueryParser._default_handle
        and kind._parse_shape is QueryParser._parse_shape
    )
    plan = []
    for member_name, member_shape in shape.members.items():
        handler = getattr(kind, f"_parse_{member_shape.type_name}", None)
        if plain_read and handler is None:
            how = _TEXT
        elif plain_read and handler is QueryParser._parse_integer:
            how = _INTEGER
        else:
            how = _OTHER
        plan.append(
            (
                parser._parsed_key_name(member_name),
                parser._get_serialized_name(member_shape, member_name),
                member_shape,
                how,
                member_shape.metadata.get("default", UNDEFINED),
            )
        )
    plans[kind] = plan
    return plan


def parse_structures_by_a_plan() -> None:
    """Parse each structure of a query-protocol request by a list of its members worked out
    once per shape, instead of asking the shape and the parser again for every member of every
    element (moto makes some 25,000 calls for RegisterTargets of 200 targets).

    A member whose handler is the parser's plain read (strings, enums) or its integer read is
    read here as that handler reads it: the value under its name, else the shape's default,
    an integer through ``int``; every other member (lists, nested structures, booleans,
    timestamps, maps) goes through moto's own ``_parse_shape``. The names, the order of the
    members and what makes a structure absent are moto's, so every parse comes out as moto's.
    """
    from moto.core.parse import UNDEFINED, QueryParser

    original = QueryParser._parse_structure
    if getattr(original, "polyccm_planned", False):
        return

    @functools.wraps(original)
    def parse_structure(
        self: Any, shape: Any, query_params: Mapping[str, Any], prefix: str = ""
    ) -> Any:
        if self._gonna_recurse(query_params, prefix):
            return UNDEFINED
        return _structure(self, _plan(self, shape), query_params, prefix)

    parse_structure.polyccm_planned = True  # type: ignore[attr-defined]
    QueryParser._parse_structure = parse_structure  # type: ignore[method-assign]


def _structure(parser: Any, plan: Any, query_params: Mapping[str, Any], prefix: str) -> Any:
    """moto's parse of a structure under ``prefix`` that has parameters, by its ``plan``."""
    from moto.core.parse import UNDEFINED

    parsed = parser.MAP_TYPE()
    for key, name, member_shape, how, default in plan:
        member_prefix = f"{prefix}.{name}" if prefix else name
        if how == _OTHER:
            value = parser._parse_shape(member_shape, query_params, member_prefix)
        else:
            value = query_params.get(member_prefix, default)
            if how == _INTEGER and value is not UNDEFINED:
                value = int(value)
        if value is not UNDEFINED:
            parsed[key] = value
    return parsed if parsed != {} else UNDEFINED


def _elements(parser: Any, member: Any, node: Mapping[str, Any], list_prefix: str) -> Any:
    """moto's parse of a list's elements ``list_prefix.1``, ``.2``... up to the first absent
    one: a structure read by its plan, a string read as it stands, anything else (or anything
    a parser of its own reads) through ``_parse_shape``."""
    from moto.core.parse import UNDEFINED, QueryParser

    kind = type(parser)
    own = kind._parse_shape is QueryParser._parse_shape
    parsed: list[Any] = []
    i = 1
    if own and member.type_name == "structure" and _planned(kind._parse_structure):
        plan = _plan(parser, member)
        # moto first asks whether any name starts with the element's; when every member is
        # read by name without a default, an element read as empty is absent either way.
        ask = any(how == _OTHER or default is not UNDEFINED for _, _, _, how, default in plan)
        while True:
            element = f"{list_prefix}.{i}"
            if ask and parser._gonna_recurse(node, element):
                break
            value = _structure(parser, plan, node, element)
            if value is UNDEFINED:
                break
            parsed.append(value)
            i += 1
    elif (
        own
        and getattr(kind, f"_parse_{member.type_name}", None) is None
        and kind._default_handle is QueryParser._default_handle
        and "default" not in member.metadata
    ):
        while (value := node.get(f"{list_prefix}.{i}", UNDEFINED)) is not UNDEFINED:
            parsed.append(value)
            i += 1
    else:
        while (value := parser._parse_shape(member, node, f"{list_prefix}.{i}")) is not UNDEFINED:
            parsed.append(value)
            i += 1
    return parsed if parsed != [] else UNDEFINED


def _planned(function: Any) -> bool:
    return bool(getattr(function, "polyccm_planned", False))


def parse_lists_by_a_plan() -> None:
    """Parse a query-protocol list's elements without dispatching each through moto's
    ``_parse_shape``: a list of structures (RegisterTargets' 200 targets) is read element by
    element by the structure's plan (see :func:`parse_structures_by_a_plan`), a list of strings
    (DescribeInstances' ids) by reading each name. The elements' names (the member's name or
    ``member`` of the query protocol, none for EC2's), moto's empty-list form and the end of
    a list at its first absent element are moto's, so every parse comes out as moto's."""
    from moto.core.parse import UNDEFINED, EC2QueryParser, QueryParser

    query_list = QueryParser._parse_list
    ec2_list = EC2QueryParser._parse_list
    if getattr(query_list, "polyccm_planned", False):
        return

    @functools.wraps(query_list)
    def parse_list(self: Any, shape: Any, node: Mapping[str, Any], prefix: str = "") -> Any:
        if node.get(prefix, UNDEFINED) == "":
            return []
        if shape.is_flattened:
            list_prefix = prefix
            location_name = self._get_serialized_name(shape.member, None)
            if location_name is not None:
                list_prefix = ".".join([*prefix.split(".")[:-1], location_name])
        else:
            list_prefix = f"{prefix}.{self._get_serialized_name(shape.member, 'member')}"
        return _elements(self, shape.member, node, list_prefix)

    @functools.wraps(ec2_list)
    def parse_ec2_list(self: Any, shape: Any, node: Mapping[str, Any], prefix: str = "") -> Any:
        return _elements(self, shape.member, node, prefix)

    parse_list.polyccm_planned = True  # type: ignore[attr-defined]
    parse_ec2_list.polyccm_planned = True  # type: ignore[attr-defined]
    QueryParser._parse_list = parse_list  # type: ignore[method-assign]
    EC2QueryParser._parse_list = parse_ec2_list  # type: ignore[method-assign]


def look_the_ec2_backend_up_once_per_registration() -> None:
    """Find a target group's EC2 backend once per RegisterTargets, not once per target.

    moto's ``FakeTargetGroup.register`` reads its ``ec2_backend`` property (two lookups in
    moto's per-account, per-region backend dicts) for each target it checks. The backend is
    the same for every target of one call, the checks, their order and their errors are
    moto's."""
    from moto.elbv2.exceptions import TargetNotRunning
    from moto.elbv2.models import FakeTargetGroup

    original = FakeTargetGroup.register
    if getattr(original, "polyccm_once", False):
        return

    @functools.wraps(original)
    def register(self: Any, targets: list[dict[str, Any]]) -> None:
        if not targets:
            return
        backend = self.ec2_backend
        for target in targets:
            instance = backend.get_instance_by_id(target["Id"])
            if instance and instance.state != "running":
                raise TargetNotRunning(instance_id=target["Id"])
            self.targets[target["Id"]] = {"Id": target["Id"], "Port": target.get("Port", self.port)}
            self.deregistered_targets.pop(target["Id"], None)

    register.polyccm_once = True  # type: ignore[attr-defined]
    FakeTargetGroup.register = register  # type: ignore[method-assign]


def remember_each_responses_actions() -> None:
    """List the methods of a moto response class once, not on every call it answers.

    Before calling an action, moto checks that the response class has a method of that name
    by listing all of the class's functions with ``inspect.getmembers``: 0.5 ms for EC2's
    class of some 700 methods, about a third of a small EC2 call's dispatch. A class's
    methods are fixed once moto is imported and patched, so the list is the same each time;
    each caller gets its own copy of it."""
    import moto.core.responses

    original = moto.core.responses.method_names_from_class  # type: ignore[attr-defined]
    if getattr(original, "polyccm_remembered", False):
        return
    known: dict[object, list[str]] = {}

    @functools.wraps(original)
    def method_names_from_class(clazz: object) -> list[str]:
        names = known.get(clazz)
        if names is None:
            names = known[clazz] = list(original(clazz))
        return list(names)

    method_names_from_class.polyccm_remembered = True  # type: ignore[attr-defined]
    moto.core.responses.method_names_from_class = method_names_from_class  # type: ignore[attr-defined]


def _answer(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """Run a WSGI app to the end: its status, headers and whole body."""
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [status, list(headers)]
        return chunks.append

    iterable = app(environ, start_response)
    try:
        chunks.extend(iterable)
    finally:
        close = getattr(iterable, "close", None)
        if close is not None:
            close()
    return started[0], started[1], b"".join(chunks)


def keep_connections_alive() -> None:
    """Answer an HTTP/1.1 request on a connection that stays open for the client's next one,
    instead of werkzeug's closing every connection after one answer.

    werkzeug's server ends each answer with ``Connection: close``, so botocore opens a new TCP
    connection for every call and the server starts a thread for each, and then waits for the
    client to close: about 0.8 ms of the emulator's CPU per call whatever the call. Here a
    request with a ``Content-Length`` body (every call botocore makes) is read whole, handed to
    the app as werkzeug would hand it, and answered with the app's status, headers and bytes
    (plus the ``Content-Length`` werkzeug would have replaced by chunks), in one write; the
    connection's thread then waits for the next request. Anything else (HTTP/1.0, a chunked
    or ``Expect`` request, ``HEAD``) goes to werkzeug, as before; an app that fails is logged
    and answered as werkzeug does, and its connection closed."""
    import socket

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.debug.tbtools import DebugTraceback
    from werkzeug.exceptions import InternalServerError

    original = MotoRequestHandler.run_wsgi
    if getattr(original, "polyccm_kept_alive", False):
        return

    @functools.wraps(original)
    def run_wsgi(self: Any) -> None:
        headers = self.headers
        length = headers.get("Content-Length") or "0"
        if (
            self.close_connection
            or not length.isdigit()
            or "Transfer-Encoding" in headers
            or "Expect" in headers
            or self.command == "HEAD"
        ):
            original(self)
            return
        body = self.rfile.read(int(length)) if length != "0" else b""
        if len(body) < int(length):  # the client went away mid-request
            self.close_connection = True
            return
        environ = self.make_environ()
        environ["wsgi.input"] = io.BytesIO(body)
        self.environ = environ
        try:
            status, answer_headers, data = _answer(self.server.app, environ)
        except Exception as error:  # werkzeug's log and answer for an app that fails
            if self.server.passthrough_errors:
                raise
            trace = DebugTraceback(error).render_traceback_text()
            self.server.log("error", f"Error on request:\n{trace}")
            status, answer_headers, data = _answer(InternalServerError(), environ)
            answer_headers.append(("Connection", "close"))
        code, _, message = status.partition(" ")
        self.send_response(int(code), message)
        sent = set()
        for key, value in answer_headers:
            self.send_header(key, value)
            sent.add(key.lower())
        if "content-length" not in sent and not (100 <= int(code) < 200 or int(code) in (204, 304)):
            self.send_header("Content-Length", str(len(data)))
        self._headers_buffer.append(b"\r\n" + data)
        if not getattr(self, "_polyccm_nodelay", False):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._polyccm_nodelay = True
        self.flush_headers()

    run_wsgi.polyccm_kept_alive = True  # type: ignore[attr-defined]
    MotoRequestHandler.run_wsgi = run_wsgi  # type: ignore[method-assign]


#: Each patch of this module, as the import path of what holds it (a class or module) and the
#: name it replaces (for tests that put moto's own code back).
PATCHED = (
    ("moto.core.parse.QueryParser", "_do_parse"),
    ("moto.core.parse.QueryParser", "_parse_structure"),
    ("moto.core.parse.QueryParser", "_parse_list"),
    ("moto.core.parse.EC2QueryParser", "_parse_list"),
    ("moto.elbv2.models.FakeTargetGroup", "register"),
    ("moto.moto_server.werkzeug_app.MotoRequestHandler", "run_wsgi"),
    ("moto.core.responses", "method_names_from_class"),
)


def receive_requests_cheaply() -> None:
    """Install every patch of this module (each only once)."""
    parse_query_values_from_a_dict()
    parse_structures_by_a_plan()
    parse_lists_by_a_plan()
    look_the_ec2_backend_up_once_per_registration()
    keep_connections_alive()
    remember_each_responses_actions()
