"""polyccm provider for Equinix Metal, formerly Packet (devices, elastic IPs over BGP)."""
