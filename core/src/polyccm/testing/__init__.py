"""Test support shipped with the core: the control-plane pytest plugin and the reference provider."""
