"""A local GCE: the compute v1 REST API and the metadata server, for tests, demos and
``polyccm-dev up --cloud gce``; never installed in an image.

No public GCE emulator exists, so this one is built as moto builds its services: resources and
their state in :mod:`.models` (one :class:`~.models.ComputeProject` per project), request
parsing and rendering in :mod:`.responses`, the method table in :mod:`.urls`, and the WSGI
application with the control API in :mod:`.app`. What moto lacks is added: operations that
take time, quotas and rate limits that run out, and (in this distribution's tests) every request
and response checked against Google's discovery document.

:mod:`.server` serves it (``python -m polyccm_gce_emulator --port PORT``), :mod:`.plugin`
registers it for ``polyccm-dev``, :class:`~.control.EmulatorControl` drives its control API,
:mod:`.devconfig` writes the gce.conf that points the provider at it, :mod:`.testing` runs it
for tests and :mod:`.demo` is ``make demo PROVIDER=gce``. This package imports nothing: the
plugin module is imported by every polyccm command.
"""
