"""Per-provider polyccm images built without a Docker engine: buildah on a local Debian base.

* :mod:`.tools` installs buildah and debootstrap when they are missing (apt-get, as root).
* :mod:`.base` makes the Debian base with debootstrap, cached, and imports it into buildah.
* :mod:`.buildah` runs buildah: images, their configuration and size, working containers.
* :mod:`.build` builds ``deploy/images/Dockerfile`` on that base and writes an OCI archive.
* :mod:`.sbom` writes the CycloneDX SBOM beside it (``uv export`` from ``uv.lock``).
* :mod:`.arch` names the architectures (amd64, arm64) and checks qemu for a foreign one.

``python -m polyccm_testing.images build aws`` (``make image PROVIDER=aws``) is the command line.
"""
