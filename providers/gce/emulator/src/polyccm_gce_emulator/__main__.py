"""``python -m polyccm_gce_emulator``: serve the emulator (see :mod:`.server`)."""

from polyccm_gce_emulator.server import main

main()
