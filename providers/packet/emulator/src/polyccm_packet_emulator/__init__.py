"""A local Equinix Metal (formerly Packet) API v1 for tests, demos and
``polyccm-dev up --cloud packet``; never installed in an image.

Built as the DigitalOcean emulator is: a model layer (:mod:`.backend`: one project, no HTTP)
apart from an HTTP layer (:mod:`.urls` routes, :mod:`.responses` handles, :mod:`.render` the
document's shapes, :mod:`.app` tokens, faults, the metadata service and the OpenAPI checks),
with the API's errors as typed exceptions (:mod:`.errors`). Every request is checked at run
time against Equinix Metal's OpenAPI document with openapi-core (:mod:`.openapi`); responses
too, when asked. :mod:`.server` serves it over http on loopback, :mod:`.control` is the client
of its ``/_polyccm/`` control endpoints, :mod:`.plugin` registers it for ``polyccm-dev``,
:mod:`.testing` runs it for tests and :mod:`.demo` is ``make demo PROVIDER=packet``. This
package imports nothing: the plugin module is imported by every polyccm command.
"""
