"""The two log formats of ``--logging-format``, as Kubernetes components write them.

* ``text`` (the default), klog's header before each message::

      I1203 04:05:06.123456   12345 manager.py:123] message

  the severity (``I``, ``W``, ``E``; debug lines are ``I``, as klog's ``V(4)`` lines), month
  and day, local time to the microsecond, the process id right-aligned in seven columns, the
  source file and line (klog.go ``formatHeader``).
* ``json``, one object a line, as component-base's JSON logger (logs/json/json.go:
  ``ts`` in milliseconds since the epoch as a float, ``caller``, ``msg``, then ``v`` the
  verbosity for an info line, or ``err`` with the exception for an error line)::

      {"ts":1733198706123.456,"caller":"manager.py:123","msg":"message","v":0}

Secrets are masked before either formatter runs: :class:`polyccm.logredact.RedactingFilter`
rewrites the message, the traceback and the stack of each record on the handler.
"""

from __future__ import annotations

import json
import logging
import os
import time

from polyccm import logredact

FORMATS = ("text", "json")
_SEVERITY = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W"}


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> None:
    """The record's traceback as text, masked (the redacting filter has usually done it)."""
    if record.exc_info and not record.exc_text:
        record.exc_text = logredact.redact(formatter.formatException(record.exc_info))


def _verbosity(record: logging.LogRecord) -> int:
    """klog's V level of an info record: 4 for debug (``--v>=4``), else 0."""
    return 4 if record.levelno < logging.INFO else 0


class KlogFormatter(logging.Formatter):
    """klog's text header, then the message (and the traceback on the lines after it)."""

    def format(self, record: logging.LogRecord) -> str:
        _exception_text(self, record)
        severity = _SEVERITY.get(record.levelno, "E")
        moment = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        header = (
            f"{severity}{moment.tm_mon:02d}{moment.tm_mday:02d} "
            f"{moment.tm_hour:02d}:{moment.tm_min:02d}:{moment.tm_sec:02d}.{micros:06d} "
            f"{record.process or os.getpid():7d} {record.filename}:{record.lineno}] "
        )
        text = header + record.getMessage()
        if record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + record.stack_info
        return text


class JsonFormatter(logging.Formatter):
    """component-base's JSON lines: ``ts``, ``caller``, ``msg``, then ``v`` or ``err``."""

    def format(self, record: logging.LogRecord) -> str:
        _exception_text(self, record)
        line: dict[str, object] = {
            "ts": round(record.created * 1000, 6),
            "caller": f"{record.filename}:{record.lineno}",
            "msg": record.getMessage(),
        }
        if record.levelno < logging.ERROR:
            line["v"] = _verbosity(record)
        if record.exc_text:
            line["err"] = record.exc_text
        if record.stack_info:
            line["stacktrace"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def formatter(name: str) -> logging.Formatter:
    """The formatter of ``--logging-format`` ``name`` (``text`` or ``json``)."""
    return JsonFormatter() if name == "json" else KlogFormatter()
