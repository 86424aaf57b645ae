"""What the cloud emulators built on an OpenAPI document share (DigitalOcean, Equinix Metal).

Each emulator keeps its cloud's own parts (routes, models, error bodies and messages); these
modules hold the machinery that does not depend on the cloud:

* :mod:`.openapi`: loading the trimmed OpenAPI document and openapi-core's request/response
  validation against a *strict* reading of it, answering with the cloud's own errors;
* :mod:`.http`: routing, the JSON body, faults and response mismatches of one request;
* :mod:`.faults`: call counting and fault injection per ``operationId``;
* :mod:`.control`: the ``/_polyccm/`` control endpoints (server side) and their client;
* :mod:`.settings`: an emulator's tunables and the guard on changing them at run time;
* :mod:`.trim`: cutting the served operations out of a cloud's published document;
* :mod:`.timers`: the emulators' clocks; :mod:`.serving`: loopback-only serving;
* :mod:`.testing`: running an emulator and JSON clients of it, for providers' ``testing``.

Needs what an emulator distribution installs (openapi-core, werkzeug).
"""
