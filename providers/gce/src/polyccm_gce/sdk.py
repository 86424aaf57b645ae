"""google-cloud-compute's ``compute_v1``, loaded when first used, not when polyccm starts.

Importing ``compute_v1`` defines a class for every message of the compute API and a client for
each of its ~90 services: about 1.5 s of CPU and 120 MiB with byte-compiled modules (3.5 s more
without), most of polyccm's start-up for ``--provider gce``. The provider's modules name it
through :data:`compute_v1` here, which imports the real module on the first attribute read (for
type checkers it is the module itself). :func:`load_in_background` starts that import in a
thread while the manager connects and fills its caches, so that the first cloud call rarely
waits for it and start-up to ``/readyz`` does not.
"""

from __future__ import annotations

import importlib
import logging
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

log = logging.getLogger(__name__)

MODULE = "google.cloud.compute_v1"


class _LazyModule:
    """Stands for a module; imports it on the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)


if TYPE_CHECKING:
    from google.cloud import compute_v1
else:
    compute_v1 = _LazyModule(MODULE)

__all__ = ["compute_v1", "load_in_background"]


def _load() -> None:
    try:
        importlib.import_module(MODULE)
    except Exception:
        log.debug("loading %s in the background failed", MODULE, exc_info=True)


def load_in_background() -> threading.Thread:
    """Start importing ``compute_v1`` in a daemon thread (its first user waits for the end of
    this import, not for a second one)."""
    thread = threading.Thread(target=_load, name="gce-sdk-load", daemon=True)
    thread.start()
    return thread
