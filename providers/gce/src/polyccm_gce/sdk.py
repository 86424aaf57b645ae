"""google-cloud-compute's ``compute_v1``, with only the clients and types polyccm uses loaded.

Importing ``compute_v1`` whole defines a class for every message of the compute API (its
``types.compute`` module) and imports a client for each of its ~100 services (about 900
modules): with the first ``aggregatedList``, 5.5-6.5 s of CPU and 165 MiB of peak RSS in a
process of its own here, which the provider paid in a background thread while the first burst
of nodes was being initialised (half the GIL's time then). polyccm uses 14 clients (operation
pollers included). :func:`install` makes ``compute_v1`` load name by name
(:mod:`polyccm.lazypackage`): it is the real package, whose ``InstancesClient`` imports
``services/instances`` (with ``types.compute``, which every client needs: ~1.1 s and ~80 MiB of
what is left) and nothing else: 2.0-2.3 s and 153 MiB. ``types.compute`` itself is then built
with only the message classes the 14 clients reach (:mod:`polyccm_gce.compute_types`): the 14
clients 1.4 -> 0.7 s of CPU and 109 -> 71 MiB of peak RSS. Nothing is installed when
``compute_v1`` is imported already (it is then the whole package, and works the same).

The provider's modules name it through :data:`compute_v1` here, which installs and imports it
on the first attribute read (for type checkers it is the module itself).
:func:`load_in_background` loads the types and the instances client (what the first cloud call
needs) in a thread while the manager connects and fills its caches, so that start-up to
``/readyz`` does not wait for them.
"""

from __future__ import annotations

import importlib
import logging
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

from polyccm import lazypackage

from polyccm_gce import compute_types

log = logging.getLogger(__name__)

MODULE = "google.cloud.compute_v1"
#: What :func:`load_in_background` loads: the first cloud call's client and types.
FIRST_NEEDED = ("InstancesClient", "Instance")


def install() -> bool:
    """Make ``compute_v1`` load name by name, and its message classes only the clients'
    (:mod:`polyccm_gce.compute_types`); whether it now does. Safe to call many times and from
    any thread."""
    if not lazypackage.install((MODULE,)):
        return False
    compute_types.install()
    return True


def load() -> ModuleType:
    """The ``compute_v1`` package, loading name by name where :func:`install` could make it."""
    install()
    return importlib.import_module(MODULE)


class _LazyModule:
    """Stands for ``compute_v1``; installs and imports it on the first attribute read."""

    def __init__(self) -> None:
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = load()
        return getattr(module, attribute)


if TYPE_CHECKING:
    from google.cloud import compute_v1
else:
    compute_v1 = _LazyModule()

__all__ = ["compute_v1", "install", "load", "load_in_background"]


def _load() -> None:
    try:
        module = load()
        for name in FIRST_NEEDED:
            getattr(module, name)
    except Exception:
        log.debug("loading %s in the background failed", MODULE, exc_info=True)


def load_in_background() -> threading.Thread:
    """Start loading what the first cloud call needs of ``compute_v1`` in a daemon thread (a
    user of the same module waits for the end of this import, not for a second one)."""
    thread = threading.Thread(target=_load, name="gce-sdk-load", daemon=True)
    thread.start()
    return thread
