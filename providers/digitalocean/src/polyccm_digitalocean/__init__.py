"""polyccm provider for DigitalOcean (droplets and load balancers)."""
