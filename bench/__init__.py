"""polyccm's benchmark harness (``make bench``): the scenarios of issue 13 run against the real
local control plane and each provider's emulator, polyccm beside the upstream Go CCM, the Go
framework's floor and a bare client's bound. See bench/README.md."""
