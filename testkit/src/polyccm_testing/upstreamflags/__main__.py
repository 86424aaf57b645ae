"""``python -m polyccm_testing.upstreamflags``: print upstream's cloud-controller-manager flags
(and feature gates) as JSON."""

from polyccm_testing.upstreamflags import main

raise SystemExit(main())
