"""Operator tools: ``polyccm plan``, ``polyccm orphans`` and ``polyccm check-service``.

:mod:`polyccm.ops.contract` is what a provider implements for them, and
:mod:`polyccm.ops.recording` helps it plan with its own ensure code; the other modules are the
core's side (planning, orphan handling, Service checks, output, the commands).
"""
