"""The secure port as upstream's controller managers serve it: always HTTPS
(:mod:`~polyccm.serving.certs` picks or makes the certificate) and every request checked by the
API server (:mod:`~polyccm.serving.delegated`: TokenReview, then SubjectAccessReview). The
endpoints themselves are :mod:`polyccm.health`'s."""

PAIR_NAME = "cloud-controller-manager"
"""Base name of the certificate files in ``--cert-dir`` (upstream's ``ServerCert.PairName``)."""
