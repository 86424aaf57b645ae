"""The upstream cloud-controller-managers as peers of polyccm in the switch tests (issue 25):
:mod:`.builds` builds or finds each upstream binary (cached beside the control plane's, in
``~/.cache/polyccm/bin``), :mod:`.run` runs one against a kubeconfig and an emulator on loopback
only, :mod:`.recording` keeps what a CCM asks of its cloud, and :mod:`.goldens` keeps what
upstream did, step by step, for the machines that cannot build it. The AWS peer is built from
the Go module proxy and runs live in ``make test``; the others cannot be built from the proxy
and their switch tests replay goldens recorded where a developer had one.
"""
