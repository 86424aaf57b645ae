"""``python -m polyccm_digitalocean_emulator``: serve the emulator (see :mod:`.server`)."""

from polyccm_digitalocean_emulator.server import main

main()
