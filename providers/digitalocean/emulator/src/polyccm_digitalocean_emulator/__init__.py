"""A local DigitalOcean API v2 for tests, demos and ``polyccm-dev up --cloud digitalocean``;
never installed in an image.

Built as moto builds its services: a model layer (:mod:`.backend` and the resource modules:
one emulated account, no HTTP) apart from an HTTP layer (:mod:`.urls` routes,
:mod:`.responses` parses and renders, :mod:`.app` adds tokens, rate limits, faults and the
OpenAPI checks), with DigitalOcean's errors as typed exceptions (:mod:`.errors`). Every
request is checked at run time against DigitalOcean's OpenAPI document with openapi-core
(:mod:`.openapi`); responses too, when asked. :mod:`.server` serves it over TLS on loopback,
:mod:`.control` is the client of its ``/_polyccm/`` control endpoints, :mod:`.plugin`
registers it for ``polyccm-dev``, :mod:`.testing` runs it for tests and :mod:`.demo` is
``make demo PROVIDER=digitalocean``. This package imports nothing: the plugin module is
imported by every polyccm command.
"""
