"""polyccm provider for Google Compute Engine (instances, network load balancers, routes)."""
