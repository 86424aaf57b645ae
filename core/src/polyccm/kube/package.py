"""The modules of the ``kubernetes`` package polyccm uses, imported with what they need only.

``import kubernetes.config.incluster_config`` first runs ``kubernetes/__init__.py`` and
``kubernetes/config/__init__.py``, which import the whole package: the dynamic client, streams
(websocket-client), watch, leader election, informer, and the kubeconfig loader with
requests-oauthlib, google-auth when installed and, through ``ApiClient``, pydantic. Measured
on top of a started polyccm (Python 3.11, byte-compiled): 20 MiB of resident memory and 385
modules, where the in-cluster loader, ``Configuration`` and the REST client an in-cluster
polyccm needs take 1.7 MiB and 30 modules (a kubeconfig also needs the kubeconfig loader,
``kubernetes.config.kube_config``, which brings most of the rest).

So :func:`module` registers those two packages before importing a module of theirs, without
running their ``__init__``; the first time anything asks either for a name it defines (not a
submodule already imported: ``kubernetes.watch``, ``kubernetes.__version__``,
``kubernetes.config.load_kube_config``), its ``__init__`` runs then, in place, so the package
behaves as it always does for any other code in the process. Nothing of the package is
replaced or re-implemented: polyccm only imports less of it, later.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from typing import Any

LAZY_PACKAGES = ("kubernetes", "kubernetes.config")
"""Packages whose ``__init__`` runs only when a name it defines is first asked for."""

_lock = threading.RLock()


def module(name: str) -> Any:
    """The package's module ``name`` (such as ``kubernetes.client.rest``)."""
    with _lock:
        for package in LAZY_PACKAGES:
            if package not in sys.modules:
                _register(package)
    return importlib.import_module(name)


def _register(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    package = importlib.util.module_from_spec(spec)  # __path__, __spec__...: not run yet
    loader = spec.loader

    def __getattr__(attribute: str) -> Any:  # noqa: N807 - the module-level hook's name
        with _lock:
            if package.__dict__.get("__getattr__") is __getattr__:
                del package.__dict__["__getattr__"]
                loader.exec_module(package)
        try:
            return package.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    package.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)
