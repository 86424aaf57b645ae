"""polyccm-testing: what helps develop and test polyccm and its providers, never what runs in a
cluster. The local control plane (``polyccm-dev``, :mod:`polyccm_testing.devenv`), the pytest
plugin with the control-plane fixtures, the reference fake cloud, Kubernetes object builders and
the provider conformance kit. Images never contain it; providers' tests depend on it."""
