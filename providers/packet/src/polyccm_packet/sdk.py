"""equinix's ``metalv1``, with only the modules polyccm touches imported.

``equinix.services.metalv1`` imports, in its ``__init__``, all 40 of its API classes (each
method wrapped in pydantic's ``validate_call``, which builds a validator when the class is
defined) and all 265 request and answer models (each a pydantic class, built when defined), and
its ``ApiClient`` imports the models package whole: about 2.4 s of CPU and 68 MiB of peak RSS
in a process of its own, which the provider paid in the background while the first burst of
nodes was being initialised. polyccm uses five API classes, the client and five request
models, and reads answers as plain JSON: loading only those (and the ~100 models their modules
name) is about 0.85 s and 43 MiB.

:func:`install` puts ``metalv1`` and its ``api`` and ``models`` packages in ``sys.modules``
without running their ``__init__``: each is the real package (its path, so every submodule
imports as it always does) whose names load on first use, from the module the ``__init__``
would have imported them from (read from its ``from ... import ...`` lines). So ``from
equinix.services import metalv1; metalv1.DevicesApi`` imports ``api/devices_api.py`` and the
models it names, and nothing else. Nothing is installed when ``metalv1`` is imported already
(it is then the whole package, and works the same).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGE = "equinix.services.metalv1"
#: The packages loaded name by name (their ``__init__`` imports every module they hold).
LAZY = (PACKAGE, f"{PACKAGE}.api", f"{PACKAGE}.models")
_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)\s*$", re.M)
_lock = threading.Lock()


def _exports(init: Path) -> dict[str, str]:
    """What a package's ``__init__`` imports: each name and the module it comes from."""
    return {name: module for module, name in _IMPORT.findall(init.read_text(encoding="utf-8"))}


def _lazy_package(name: str) -> ModuleType | None:
    """The package ``name``, its ``__init__`` not run, its names loaded on first read."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        return None
    module = importlib.util.module_from_spec(spec)
    exports = _exports(Path(spec.origin))

    def __getattr__(attribute: str) -> Any:  # noqa: N807 - PEP 562's module __getattr__
        source = exports.get(attribute)
        if source is None:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(source), attribute)
        setattr(module, attribute, value)
        return value

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def install() -> bool:
    """Make ``metalv1`` load name by name (see the module's docstring); whether it now does.
    Safe to call many times and from any thread."""
    with _lock:
        if PACKAGE in sys.modules:
            return getattr(sys.modules[PACKAGE], "__getattr__", None) is not None
        try:
            importlib.import_module("equinix.services")
        except ImportError:
            return False
        for name in LAZY:
            module = _lazy_package(name)
            if module is None:
                for done in LAZY:
                    sys.modules.pop(done, None)
                return False
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)
        return True


def metalv1() -> Any:
    """The ``metalv1`` package, loading name by name where :func:`install` could make it."""
    install()
    return importlib.import_module(PACKAGE)
