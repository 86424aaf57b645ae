"""The four controllers of the cloud-controller-manager, each in its own module.

``cloud-node`` initialises nodes from the cloud, ``cloud-node-lifecycle`` removes nodes whose
instances are gone and taints shut-down ones, ``service`` manages load balancers, ``route``
manages pod-network routes. They share the machinery in :mod:`polyccm.controllers.base`.
"""
