"""polyccm run in-cluster, as its Deployment runs it (deploy/kustomize/base): no
``--kubeconfig``, its ServiceAccount's token and the control plane's CA at
``/var/run/secrets/kubernetes.io/serviceaccount``, ``KUBERNETES_SERVICE_HOST``/``_PORT`` naming
the API server (here the loopback one).

The directory is mounted in a private mount namespace of polyccm's process only: ``unshare
--mount --propagation private`` runs a small shell script that lays an overlay (its writable
layer on a tmpfs) over the directory ``/var/run`` resolves to, makes the mount point in it,
bind-mounts the account's directory there read-only, and then ``exec``s polyccm (the same
process: its memory high-water mark starts again at the ``exec``). Nothing changes outside that
namespace, which goes when the process ends.

What a CCM loads at start matters to polyccm only: the ``kubernetes`` package's kubeconfig
loader imports far more than its in-cluster loader (its API client, models, OAuth); polyccm's
peak RSS at 100 nodes and 10 Services is 9 to 13 MiB lower in-cluster. The Go CCMs keep their
kubeconfig: client-go's in-cluster and kubeconfig loaders are in the binary either way.

Where ``unshare`` or a mount cannot be made (not root, no ``CAP_SYS_ADMIN``), or
``POLYCCM_BENCH_CONNECTION=kubeconfig`` asks for it, polyccm is given its kubeconfig, and the
results' settings say so.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import yaml

#: Where a pod's ServiceAccount is mounted (polyccm.kube.config.SERVICE_ACCOUNT).
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

_SCRIPT = r"""set -e
account=$1; scratch=$2; shift 2
run=$(readlink -f /var/run)
mount -t tmpfs -o size=1m,mode=0700 tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work"
mount -t overlay overlay -o "lowerdir=$run,upperdir=$scratch/upper,workdir=$scratch/work" "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
mount --bind "$account" "$run/secrets/kubernetes.io/serviceaccount"
mount -o remount,bind,ro "$run/secrets/kubernetes.io/serviceaccount"
exec "$@"
"""


def write_account(directory: Path, identity: str, token: str, ca_cert: Path) -> Path:
    """``identity``'s service account directory (``token``, ``ca.crt``, ``namespace``) as the
    kubelet mounts it; returns its path."""
    account = directory / f"serviceaccount-{identity}"
    account.mkdir(mode=0o700, exist_ok=True)
    (account / "token").write_text(token)
    (account / "token").chmod(0o600)
    shutil.copyfile(ca_cert, account / "ca.crt")
    (account / "namespace").write_text("kube-system")
    return account


def account_of(kubeconfig: Path) -> Path:
    """The service account directory :func:`write_account` made beside ``kubeconfig``
    (``kubeconfig-<identity>``)."""
    identity = kubeconfig.name.removeprefix("kubeconfig-")
    return kubeconfig.with_name(f"serviceaccount-{identity}")


def server_of(kubeconfig: Path) -> str:
    """The server of ``kubeconfig``'s (only) cluster."""
    document = yaml.safe_load(kubeconfig.read_text())
    return str(document["clusters"][0]["cluster"]["server"])


def service_env(server: str) -> dict[str, str]:
    """``KUBERNETES_SERVICE_HOST``/``_PORT`` for the API server at ``server`` (an
    ``https://host:port`` URL)."""
    parts = urlsplit(server)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"no host and port in {server!r}")
    return {"KUBERNETES_SERVICE_HOST": parts.hostname, "KUBERNETES_SERVICE_PORT": str(parts.port)}


#: Set to ``kubeconfig``, polyccm is given its kubeconfig as the Go CCMs are (to see what the
#: package's kubeconfig loader costs).
VARIABLE = "POLYCCM_BENCH_CONNECTION"


@functools.cache
def available() -> str:
    """Empty when polyccm runs in-cluster here: a private mount namespace can be made and
    :data:`VARIABLE` does not ask for the kubeconfig; else why not."""
    if os.environ.get(VARIABLE) == "kubeconfig":
        return f"{VARIABLE}=kubeconfig"
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
             "mount -t tmpfs tmpfs /mnt && mount -o remount,ro /mnt"]  # fmt: skip
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except OSError as error:
        return f"unshare: {error.strerror}"
    if done.returncode != 0:
        lines = (done.stderr.strip() or f"exit {done.returncode}").splitlines()
        return f"unshare --mount: {lines[-1]}"
    return ""


def wrap(argv: Sequence[str], account: Path, scratch: Path) -> list[str]:
    """``argv`` run with ``account`` at :data:`SERVICE_ACCOUNT` in a mount namespace of its
    own (``scratch``, an empty directory, holds the namespace's tmpfs)."""
    scratch.mkdir(mode=0o700, exist_ok=True)
    return ["unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", _SCRIPT, "incluster", str(account), str(scratch), *argv]  # fmt: skip


def observed(pid: int) -> str:
    """How process ``pid`` reaches the API server, as the kernel shows it: ``in-cluster`` when
    a service account is mounted at :data:`SERVICE_ACCOUNT` in its mount namespace,
    ``KUBERNETES_SERVICE_HOST`` is in its environment and ``--kubeconfig`` not
    on its command line; else ``kubeconfig``."""
    try:
        mounts = Path(f"/proc/{pid}/mountinfo").read_text()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "unknown"
    point = os.path.realpath("/var/run") + "/secrets/kubernetes.io/serviceaccount"
    mounted = any(line.split()[4] == point for line in mounts.splitlines() if line.split())
    has_host = any(item.startswith(b"KUBERNETES_SERVICE_HOST=") for item in environ)
    flagged = any(item.startswith(b"--kubeconfig") for item in argv)
    return "in-cluster" if mounted and has_host and not flagged else "kubeconfig"


def host_state() -> Mapping[str, object]:
    """What this (the host's) namespace has at ``/var/run/secrets``: whether it exists, its
    entries and whether anything is mounted under it, to show a run left it as it was."""
    secrets = SERVICE_ACCOUNT.parent.parent
    real = os.path.realpath(secrets)
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    under = sorted(line.split()[4] for line in mounts if line.split()[4].startswith(real))
    entries = sorted(str(p) for p in secrets.rglob("*")) if secrets.exists() else []
    return {"exists": secrets.exists(), "entries": entries, "mounts": under}


def setting() -> str:
    """How polyccm reaches the API server, for the results' settings line."""
    reason = available()
    if reason:
        return (
            f"polyccm with its ServiceAccount's kubeconfig, not in-cluster ({reason}): its "
            "peak RSS counts the kubernetes package's kubeconfig loader (9-13 MiB at 100/10)"
        )
    return (
        "polyccm in-cluster as its Deployment runs it: no --kubeconfig, its ServiceAccount's "
        f"token and CA at {SERVICE_ACCOUNT} (mounted in its own mount namespace), "
        "KUBERNETES_SERVICE_HOST/PORT the loopback API server; the Go CCMs with a kubeconfig "
        "(client-go holds both loaders whichever it uses)"
    )
