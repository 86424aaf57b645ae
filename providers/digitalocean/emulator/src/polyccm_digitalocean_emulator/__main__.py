"""``python -m polyccm_digitalocean.emulator``: serve the emulator (see :mod:`.server`)."""

from polyccm_digitalocean.emulator.server import main

main()
