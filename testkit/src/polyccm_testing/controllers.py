"""A provider's own controllers run as the manager runs them, for the providers' tests.

:func:`provider_controllers` gives each controller a term of its own on the real API server:
node and service caches, an event recorder, the controller's ``run`` in its thread; all stopped
on leaving. One runner for every provider's tests (the tagging, firewall, BGP... controllers);
:func:`registered_controller` finds a controller as a provider's plugin registers it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def provider_controllers(
    kube_api: Any, provider: Any, *factories: Callable[[Any], Any], provider_name: str = ""
) -> Iterator[list[Any]]:
    """The controllers ``factories`` make from a term's context (``TaggingController.for_term``,
    a plugin's registered constructor...) for ``provider`` (``provider_name``: the manager's
    ``--provider``, ``provider.name`` by default), running until the block is left."""
    from polyccm.app.options import ManagerOptions
    from polyccm.controllers import ControllerContext, EventRecorder, Informer
    from polyccm.kube.api import NODES, SERVICES
    from polyccm.kube.informer import slim_node

    nodes = Informer(kube_api, NODES, slim=slim_node)
    services = Informer(kube_api, SERVICES)
    recorder = EventRecorder(kube_api)
    options = ManagerOptions(provider=provider_name or str(provider.name))
    context = ControllerContext(api=kube_api, provider=provider, options=options, nodes=nodes,
                                services=services, recorder=recorder)  # fmt: skip
    controllers = [factory(context) for factory in factories]
    assert all(c is not None for c in controllers), "a controller was not made"
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in controllers]
    recorder.start()
    for informer in (nodes, services):
        informer.start()
    for thread in threads:
        thread.start()
    try:
        yield controllers
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for informer in (nodes, services):
            informer.stop()
        recorder.stop()


def registered_controller(provider_name: str, controller_name: str) -> Callable[[Any], Any]:
    """The constructor the installed ``provider_name`` plugin registers as ``controller_name``
    (one the manager runs unless told otherwise), for :func:`provider_controllers`."""
    from polyccm.plugins import installed_providers, plugin_manager
    from polyccm.plugins import provider_controllers as registered

    manager = plugin_manager()
    info = registered(manager, installed_providers(manager)[provider_name])[controller_name]
    assert info.enabled_by_default, f"{controller_name} is not enabled by default"
    constructor: Callable[[Any], Any] = info.constructor
    return constructor
