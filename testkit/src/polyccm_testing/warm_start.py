"""``python -m polyccm_testing.warm_start MODULE ARGS...``: a ``polyccm`` process started ahead.

It imports ``MODULE`` (``polyccm.cli``, or ``polyccm_testing.fake_main``), the provider
module its ``--provider=NAME`` flag points at (``polyccm_NAME.provider``, when there is one)
and the modules :data:`WARM_IMPORTS` names (a cloud SDK the provider imports lazily),
then waits for a line on stdin; only then does it run ``MODULE`` as ``__main__`` with ``ARGS``.
End of input without a line exits at once.

The fault kit's crash cycles kill ``polyccm`` dozens of times; importing a cloud SDK takes
seconds on a loaded machine. With the next process's imports done while the current one runs,
each cycle's time goes to polyccm at work, where the kills are meant to land. What runs after
the line is the unchanged command: a fresh process, its own flags, plugins and provider.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import runpy
import sys

PROVIDER_FLAG = "--provider="
WARM_IMPORTS = "POLYCCM_WARM_IMPORTS"
"""More modules to import ahead, comma-separated (a cloud SDK the provider imports lazily)."""


def main(argv: list[str]) -> None:
    module, arguments = argv[0], argv[1:]
    importlib.import_module(module)
    for argument in arguments:
        if argument.startswith(PROVIDER_FLAG):
            with contextlib.suppress(ImportError):
                importlib.import_module(f"polyccm_{argument[len(PROVIDER_FLAG) :]}.provider")
    for name in filter(None, os.environ.get(WARM_IMPORTS, "").split(",")):
        importlib.import_module(name)
    if not sys.stdin.readline():
        return
    sys.argv = [module, *arguments]
    sys.modules.pop(module, None)  # run afresh as __main__ (what it imports stays imported)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
