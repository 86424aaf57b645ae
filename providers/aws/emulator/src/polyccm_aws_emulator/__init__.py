"""A local AWS for tests, demos and ``polyccm-dev up --cloud aws``: moto's server with polyccm's
fault injection, call counting and instance metadata; never installed in an image.

:mod:`.app` is the WSGI layer around moto (calls counted, faults injected by :mod:`.faults`,
the control endpoints, the instance metadata service of :mod:`.metadata`); the ``moto_*``
modules patch moto where it answers unlike AWS (:mod:`.moto_fidelity`) or too slowly for 5,000
nodes (:mod:`.moto_speedups`, :mod:`.moto_requests`, :mod:`.moto_rendering`,
:mod:`.moto_lookups`). :mod:`.server` serves it on loopback, :mod:`.control` is the client of
its ``/_polyccm/`` endpoints, :mod:`.plugin` registers it for ``polyccm-dev``, :mod:`.testing`
runs it for tests and :mod:`.demo` is ``make demo PROVIDER=aws``. This package imports
nothing: the plugin module is imported by every polyccm command.
"""
