"""Test support shipped with the core: control-plane fixtures and the reference fake cloud."""
