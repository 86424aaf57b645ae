"""Packages whose names load one by one, on first use, rather than all when imported.

Generated cloud SDKs (equinix's ``metalv1``, google-cloud-compute's ``compute_v1``) have an
``__init__`` that imports every API class and every model they define, seconds of CPU in a
process that uses a handful of them. :func:`install` puts such a package in ``sys.modules``
without running its ``__init__``: the module is the real package (its spec and ``__path__``, so
every submodule imports as it always does) with a PEP 562 ``__getattr__`` that, on the first
read of a name, imports the module the ``__init__`` would have imported that name from (read
from its ``from ... import ...`` statements, relative ones included) and keeps the value. What
the ``__init__`` does besides those imports (a version check, ``__version__``) is not done.

Nothing is installed for a package that is imported already: it is then the whole package and
works the same, which :func:`install` reports by returning ``False``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["exports", "install", "is_lazy", "load"]

_lock = threading.Lock()


def exports(init: Path, package: str) -> dict[str, tuple[str, str]]:
    """What the package ``package``'s ``__init__`` (the file ``init``) imports at top level:
    each name it binds, with the module and the name it comes from."""
    tree = ast.parse(init.read_text(encoding="utf-8"), str(init))
    found: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        relative = "." * node.level + (node.module or "")
        source = importlib.util.resolve_name(relative, package) if node.level else relative
        for alias in node.names:
            if alias.name != "*":
                found[alias.asname or alias.name] = (source, alias.name)
    return found


def is_lazy(module: ModuleType) -> bool:
    """Whether ``module`` was installed by :func:`install` (its names load on first use)."""
    return getattr(module, "__lazy_exports__", None) is not None


def _lazy_package(name: str) -> ModuleType | None:
    """The package ``name``, its ``__init__`` not run, its names loaded on first read."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        return None
    module = importlib.util.module_from_spec(spec)
    table = exports(Path(spec.origin), name)

    def __getattr__(attribute: str) -> Any:  # noqa: N807 - PEP 562's module __getattr__
        found = table.get(attribute)
        if found is None:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        source, original = found
        origin = importlib.import_module(source)
        try:
            value = getattr(origin, original)
        except AttributeError:  # ``from package import submodule``
            try:
                value = importlib.import_module(f"{source}.{original}")
            except ModuleNotFoundError as error:
                if error.name is not None and not f"{source}.{original}".startswith(error.name):
                    raise  # a module the submodule imports
                # Neither a name nor a submodule of its module (it holds fewer names than the
                # ``__init__`` says): missing, as ``getattr`` and ``hasattr`` expect.
                raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None
        setattr(module, attribute, value)
        return value

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__lazy_exports__ = table  # type: ignore[attr-defined]
    return module


def install(packages: Sequence[str]) -> bool:
    """Put each of ``packages`` (a package, then any of its subpackages, parents first) in
    ``sys.modules`` loading name by name; whether the first one now does. Nothing is changed
    when the first is imported already, or when one of them cannot be found. Safe to call many
    times and from any thread."""
    with _lock:
        first = packages[0]
        if first in sys.modules:
            return is_lazy(sys.modules[first])
        installed: list[tuple[ModuleType | None, str, ModuleType]] = []
        try:
            for name in packages:
                parent, _, child = name.rpartition(".")
                holder = importlib.import_module(parent) if parent else None
                module = _lazy_package(name)
                if module is None:
                    raise ImportError(name)
                sys.modules[name] = module
                installed.append((holder, child, module))
        except ImportError:
            for _, _, module in installed:
                sys.modules.pop(module.__name__, None)
            return False
        for holder, child, module in installed:
            if holder is not None:
                setattr(holder, child, module)
        return True


def load(packages: Sequence[str]) -> ModuleType:
    """The first of ``packages``, imported after :func:`install` made it load name by name
    where it could (the whole package otherwise)."""
    install(packages)
    return importlib.import_module(packages[0])
