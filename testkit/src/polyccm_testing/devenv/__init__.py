"""Local development environment: the real control plane and cloud emulators (``polyccm-dev``)."""
