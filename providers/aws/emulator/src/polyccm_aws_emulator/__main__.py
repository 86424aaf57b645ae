"""``python -m polyccm_aws_emulator``: serve the emulator (see :mod:`.server`)."""

from polyccm_aws_emulator.server import main

main()
