"""google-cloud-compute's message classes, only those the provider's clients reach.

``compute_v1.types.compute`` defines a proto-plus class for each of the ~2,100 messages of the
compute API in one module (5.7 MB of source): importing it is ~1 s of CPU and most of the SDK's
peak RSS (the module's code objects and every class and descriptor, ~40 MiB more than the 14
clients need). The clients polyccm uses (:data:`CLIENTS`) name ~250 of those messages in their
requests, responses, pagers and transports; with the messages their fields hold, ~390.

:func:`install` has the first import of ``google.cloud.compute_v1.types.compute`` (by a client,
its pagers or transport, which import it as ever) build it from the SDK's own source file: its
header, its classes of those messages (each as the SDK defines it) and its proto manifest cut
to them, compiled class by class (no byte code is kept for it: ~0.1 s); the ``types`` package
loads name by name (:mod:`polyccm.lazypackage`), as ``compute_v1`` does. Measured, the 14
clients loaded, an instance built and serialised, google-auth included: 1.4 -> 0.6-0.9 s of
CPU, peak RSS 109 -> 71 MiB; polyccm in the benchmark, peak RSS 136 -> 97 MiB at 100 nodes,
148 -> 115 MiB at 1,000.

Nothing is installed, and the whole module loads as before, when the module or its package is
imported already, when the source has not the layout read here (a manifest, then one
top-level class per message, the classes and the manifest naming the same messages) or when
the cut source does not compile (nothing is made before that). The
messages left out are not there: ``compute_v1.X`` for one raises AttributeError, and the client
of another service cannot be imported in this process (``CLIENTS`` names every client the
provider builds; a test checks it against the provider's source).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import re
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

PACKAGE = "google.cloud.compute_v1"
TYPES_PACKAGE = f"{PACKAGE}.types"
TYPES = f"{TYPES_PACKAGE}.compute"

#: Every client the provider builds, operation pollers included (``api.client(...)`` and
#: :data:`polyccm_gce.api.OPERATION_CLIENTS`), by its service package under ``services``.
CLIENTS: Mapping[str, str] = {
    "AddressesClient": "addresses",
    "FirewallsClient": "firewalls",
    "ForwardingRulesClient": "forwarding_rules",
    "GlobalOperationsClient": "global_operations",
    "HealthChecksClient": "health_checks",
    "InstanceGroupsClient": "instance_groups",
    "InstancesClient": "instances",
    "ProjectsClient": "projects",
    "RegionBackendServicesClient": "region_backend_services",
    "RegionOperationsClient": "region_operations",
    "RoutesClient": "routes",
    "TargetPoolsClient": "target_pools",
    "ZoneOperationsClient": "zone_operations",
    "ZonesClient": "zones",
}

_MANIFEST = re.compile(rb"(?ms)^__protobuf__ = proto\.module\(\n(.*?)^\)\n")
_MANIFEST_NAME = re.compile(rb'^\s+"(\w+)",$', re.M)
_CLASS = re.compile(rb"(?m)^class (\w+)\(")
_ALL = b"\n__all__ = "
#: A line between the manifest and ``__all__`` that would run outside the classes: not a class
#: statement, the end of a class statement's bases (``):``), a comment or blank.
_OTHER_STATEMENT = re.compile(rb"(?m)^(?!class \w+\(|\):|#)\S")
_PACKAGE = re.compile(rb'package="([\w.]+)"')
#: How a client's modules name a message: ``compute.Instance``.
_NAMED = re.compile(r"\bcompute\.([A-Z]\w*)")
#: How a message's field names the message or enum it holds: ``message="Instance"`` (or
#: ``enum=Status``, unquoted).
_FIELD = re.compile(rb'\b(?:message|enum)="?(\w+)')

_lock = threading.Lock()
_installed = False


class LayoutError(Exception):
    """The SDK's ``types/compute.py`` is not laid out as :func:`pruned_source` reads it."""


def named_by(files: Iterable[Path]) -> set[str]:
    """The messages ``compute.X`` the source files name."""
    return {name for path in files for name in _NAMED.findall(path.read_text(encoding="utf-8"))}


def pruned_source(source: bytes, wanted: Iterable[str]) -> list[str]:
    """``types/compute.py``'s text (``source``, UTF-8) in pieces, to be run in turn: its header
    with the manifest cut to the messages of ``wanted`` and those their fields hold
    (transitively), each of their classes, and its end (``__all__``). :class:`LayoutError` when
    the text is not one manifest, then one top-level class for each message it names, then
    ``__all__``. Read in place (offsets, no copies): the file is 5.7 MB."""
    manifest = _MANIFEST.search(source)
    end = source.rfind(_ALL)
    if manifest is None or end < manifest.end():
        raise LayoutError("no proto manifest followed by __all__")
    package = _PACKAGE.search(manifest.group(1))
    if package is None:
        raise LayoutError("no package in the manifest")
    starts = [
        (m.start(), m.group(1).decode()) for m in _CLASS.finditer(source, manifest.end(), end)
    ]
    if _OTHER_STATEMENT.search(source, manifest.end(), end):
        raise LayoutError("a top-level statement other than a message class")
    blocks: dict[str, tuple[int, int]] = {}
    for (start, name), (stop, _) in zip(starts, [*starts[1:], (end, "")], strict=True):
        blocks[name] = (start, stop)
    listed = {name.decode() for name in _MANIFEST_NAME.findall(manifest.group(1))}
    if listed != blocks.keys():
        raise LayoutError("the manifest and the classes name different messages")
    missing = set(wanted) - blocks.keys()
    if missing:
        raise LayoutError(f"no class for {', '.join(sorted(missing))}")
    kept: set[str] = set()
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name not in kept:
            kept.add(name)
            held = (held.decode() for held in _FIELD.findall(source, *blocks[name]))
            pending.extend(other for other in held if other in blocks)
    names = "".join(f'        "{name}",\n' for name in sorted(kept))
    header = (
        f"{source[: manifest.start()].decode()}__protobuf__ = proto.module(\n"
        f'    package="{package.group(1).decode()}",\n'
        f"    manifest={{\n{names}    }},\n)\n"
    )
    classes = (
        source[start:stop].decode() for name, (start, stop) in blocks.items() if name in kept
    )
    return [header, *classes, source[end:].decode()]


def _service_files(root: Path) -> list[Path]:
    """The source files of the clients' services (:class:`LayoutError` when one has none: its
    messages could not be read from it)."""
    found: list[Path] = []
    for service in CLIENTS.values():
        files = sorted((root / "services" / service).rglob("*.py"))
        if not any(path.name == "client.py" for path in files):
            raise LayoutError(f"no source of the {service} client")
        found.extend(files)
    return found


class _PrunedLoader(importlib.abc.Loader):
    """Executes the cut source as the module (the import system's module lock held, so that
    another thread importing it meanwhile waits for the whole of it)."""

    def __init__(self, pieces: list[str], origin: str) -> None:
        self.pieces = pieces
        self.origin = origin

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        try:
            # Piece by piece: compiling the whole at once would hold every class's syntax tree.
            code = [compile(piece, self.origin, "exec") for piece in self.pieces]
        except (SyntaxError, ValueError) as error:
            # Nothing made yet: the SDK's whole module, from its byte code.
            log.debug("%s loads whole: %s", TYPES, error)
            whole = importlib.machinery.SourceFileLoader(TYPES, self.origin).get_code(TYPES)
            code = [] if whole is None else [whole]
        else:
            module.__polyccm_pruned__ = True  # type: ignore[attr-defined]
        for each in code:
            exec(each, module.__dict__)  # the SDK's own source
        log.debug("%s: %d message classes", TYPES, len(getattr(module, "__all__", ())))


class _Finder(importlib.abc.MetaPathFinder):
    """Answers for ``types.compute`` alone, once: the cut module, or nothing (then the import
    system finds the SDK's whole module) when the source's layout is not the one read here."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != TYPES:
            return None
        _remove(self)
        origin = self.root / "types" / "compute.py"
        try:
            pieces = pruned_source(origin.read_bytes(), named_by(_service_files(self.root)))
        except (LayoutError, OSError, UnicodeDecodeError) as error:  # the whole module then
            log.debug("%s loads whole: %s", TYPES, error)
            return None
        return importlib.util.spec_from_loader(
            fullname, _PrunedLoader(pieces, str(origin)), origin=str(origin)
        )


def _remove(finder: _Finder) -> None:
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(finder)


def install() -> bool:
    """Make ``types.compute`` load with the clients' messages only (see the module's
    docstring) when it is first imported; whether it will (or did). Nothing is done when it or
    its package is imported already. Call it after ``compute_v1`` is installed
    (:func:`polyccm_gce.sdk.install`); safe to call many times and from any thread."""
    from polyccm import lazypackage

    global _installed
    with _lock:
        if _installed:
            return True
        if TYPES in sys.modules or (
            TYPES_PACKAGE in sys.modules and not lazypackage.is_lazy(sys.modules[TYPES_PACKAGE])
        ):
            return False
        package = importlib.util.find_spec(PACKAGE)
        if package is None or not package.submodule_search_locations:
            return False
        if not lazypackage.install((TYPES_PACKAGE,)):
            return False
        sys.meta_path.insert(0, _Finder(Path(next(iter(package.submodule_search_locations)))))
        _installed = True
        return True
