"""``python -m polyccm_packet_emulator``: serve the emulator (see :mod:`.server`)."""

from polyccm_packet_emulator.server import main

main()
