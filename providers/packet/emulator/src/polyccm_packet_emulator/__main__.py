"""``python -m polyccm_packet.emulator``: serve the emulator (see :mod:`.server`)."""

from polyccm_packet.emulator.server import main

main()
