"""equinix's ``metalv1``, with only the modules polyccm touches imported.

``equinix.services.metalv1`` imports, in its ``__init__``, all 40 of its API classes (each
method wrapped in pydantic's ``validate_call``, which builds a validator when the class is
defined) and all 265 request and answer models (each a pydantic class, built when defined), and
its ``ApiClient`` imports the models package whole: about 2.4 s of CPU and 68 MiB of peak RSS
in a process of its own, which the provider paid in the background while the first burst of
nodes was being initialised. polyccm uses five API classes, the client and five request
models, and reads answers as plain JSON: loading only those (and the ~100 models their modules
name) is about 0.85 s and 43 MiB.

:func:`install` makes ``metalv1`` and its ``api`` and ``models`` packages load name by name
(:mod:`polyccm.lazypackage`): ``from equinix.services import metalv1; metalv1.DevicesApi``
imports ``api/devices_api.py`` and the models it names, and nothing else. Nothing is installed
when ``metalv1`` is imported already (it is then the whole package, and works the same).
"""

from __future__ import annotations

from typing import Any

from polyccm import lazypackage

PACKAGE = "equinix.services.metalv1"
#: The packages loaded name by name (their ``__init__`` imports every module they hold).
LAZY = (PACKAGE, f"{PACKAGE}.api", f"{PACKAGE}.models")


def install() -> bool:
    """Make ``metalv1`` load name by name (see the module's docstring); whether it now does.
    Safe to call many times and from any thread."""
    return lazypackage.install(LAZY)


def metalv1() -> Any:
    """The ``metalv1`` package, loading name by name where :func:`install` could make it."""
    return lazypackage.load(LAZY)
