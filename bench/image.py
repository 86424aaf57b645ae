"""``python -m bench.image``: polyccm's start to ready, as each provider's image runs it.

Each provider's image is built as ``make image PROVIDER=<name>`` builds it
(:func:`polyccm_testing.images.build.build_image`), and reused while the sources it is built
from are unchanged. It runs with buildah (chroot isolation: the host's network, the image's user,
entrypoint and environment) against one local control plane and the provider's emulator on
loopback, with the benchmark's flags and cloud settings (:mod:`bench.ccms`, :mod:`bench.clouds`)
and no nodes or Services. A run times polyccm's process from its start (the kernel's start time
of the command ``buildah run`` executes) until ``/readyz`` answers 200, and reads its ``VmHWM``
then; ``bench/results/image.md`` and ``image.json`` hold every run and the median of each
provider's.

``uv run --no-sync python -m bench.image [--providers aws,gce] [--runs 5] [--rebuild]
[--out DIR]`` (root, buildah and debootstrap, as ``make image``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from polyccm_testing.images.buildah import Container, command_pids, inspect_image, stop
from polyccm_testing.images.tools import ImageError
from polyccm_testing.secureport import secure_get

from bench import cluster, incluster
from bench.ccms import Knobs
from bench.clouds import CLOUDS, BenchCloud
from bench.processes import cpu_seconds, free_port, peak_rss_mib, start_seconds

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
IDENTITY = "bench-polyccm"
#: What the image is built from (the build context the Dockerfile reads, and the Dockerfile).
SOURCES = ("pyproject.toml", "uv.lock", "core", "providers", "testkit/pyproject.toml",
           "testkit/README.md", "deploy/images")  # fmt: skip
TARGET_SECONDS = 1.0


def say(message: str) -> None:
    print(f"[bench.image {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass(frozen=True)
class ImageRun:
    ready_seconds: float
    """From polyccm's process start to ``/readyz`` answering 200."""
    container_seconds: float
    """From ``buildah run`` started (the container set up first) to the same answer."""
    peak_rss_mib: float
    """``VmHWM`` of polyccm's process when it was ready."""
    cpu_seconds: float = 0.0
    """CPU time (user and system, every thread) polyccm's process had spent by then: what the
    start costs, less noisy than the wall time on a shared machine."""


@dataclass
class ImageResult:
    provider: str
    image: str
    image_bytes: int
    runs: list[ImageRun] = field(default_factory=list)
    failed: str = ""

    def median(self, name: str) -> float | None:
        values = [getattr(run, name) for run in self.runs]
        return statistics.median(values) if values else None


# -- the image ------------------------------------------------------------------------------


def _git(*arguments: str) -> bytes:
    return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, check=True).stdout


def source_key() -> str:
    """A digest of what the images are built from, uncommitted changes included."""
    digest = hashlib.sha256()
    digest.update(_git("ls-files", "-s", "--", *SOURCES))
    digest.update(_git("diff", "HEAD", "--binary", "--", *SOURCES))
    for name in _git("ls-files", "--others", "--exclude-standard", "-z", "--", *SOURCES).split(
        b"\0"
    ):
        if name:
            digest.update(name + (ROOT / name.decode()).read_bytes())
    return digest.hexdigest()[:16]


def ensure_image(provider: str, *, rebuild: bool, logs: Path) -> tuple[str, int]:
    """``provider``'s image (its id and unpacked size): the one built before from the same
    sources, else built now as ``make image`` builds it."""
    from polyccm_testing.images.base import images_cache
    from polyccm_testing.images.build import build_image
    from polyccm_testing.images.buildah import image_id, unpacked_size

    record_path = images_cache() / f"bench-image-{provider}.json"
    key = source_key()
    if not rebuild and record_path.exists():
        record = json.loads(record_path.read_text())
        if record.get("key") == key and image_id(record["name"]) == record["id"]:
            say(f"{provider}: reusing {record['name']} (sources unchanged)")
            return str(record["id"]), unpacked_size(record["name"])
    say(f"{provider}: building its image as `make image PROVIDER={provider}` does")
    with tempfile.TemporaryDirectory(prefix="polyccm-image-") as scratch:
        built = build_image(
            provider, output=Path(scratch), tag="bench", build_log=logs / f"build-{provider}.log"
        )
    say(built.summary())
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps({"key": key, "name": built.name, "id": built.id}))
    return built.id, built.size


# -- a run ------------------------------------------------------------------------------------


def readable_copies(paths: Sequence[str], stage: Path) -> dict[Path, str]:
    """Mounts (host path -> path inside) that show each file at its own path to the image's
    user: copies readable by anyone, since the originals may be the harness's own (0600)."""
    mounts: dict[Path, str] = {}
    for index, original in enumerate(sorted(set(paths))):
        copy = stage / f"{index}-{Path(original).name}"
        shutil.copyfile(original, copy)
        copy.chmod(0o644)
        mounts[copy] = original
    return mounts


def host_files(argv: Sequence[str], env: Mapping[str, str], kubeconfig: Path) -> list[str]:
    """Files of this machine that polyccm reads: named by a flag or a variable, or by the
    kubeconfig."""
    values = [a.partition("=")[2] for a in argv if a.startswith("--")] + list(env.values())
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config.get("clusters") or ():
        values.append(str(entry["cluster"].get("certificate-authority") or ""))
    return [v for v in values if v.startswith("/") and Path(v).is_file()]


def run_once(
    container: Container,
    *, argv: list[str], env: Mapping[str, str], mounts: Mapping[Path, str],
    port: int, log: Path, timeout: float = 60.0,
) -> ImageRun:  # fmt: skip
    """Start polyccm in ``container``, wait for ``/readyz``, measure, stop it."""
    command = container.command(argv, env=env, volumes=mounts)
    with log.open("ab") as output:
        began = time.clock_gettime(time.CLOCK_BOOTTIME)
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            pid = 0
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise RuntimeError(f"polyccm exited ({process.returncode}); see {log}")
                if not pid:
                    pid = next(iter(command_pids(process)), 0)
                if pid and secure_get(port, "/readyz", timeout=2.0).status == 200:
                    ready = time.clock_gettime(time.CLOCK_BOOTTIME)
                    return ImageRun(
                        ready_seconds=ready - start_seconds(pid),
                        container_seconds=ready - began,
                        peak_rss_mib=peak_rss_mib(pid),
                        cpu_seconds=cpu_seconds(pid),
                    )
                time.sleep(0.01)
            raise RuntimeError(f"polyccm not ready within {timeout:.0f} s; see {log}")
        finally:
            if process.poll() is None:
                stop(process)


def measure(
    provider: str, image: str, cloud: BenchCloud, *, kubeconfig: Path, runs: int, work: Path
) -> list[ImageRun]:
    entrypoint = list(inspect_image(image).entrypoint)
    port = free_port()
    # In-cluster, as its Deployment runs it: the ServiceAccount's token and CA mounted where a
    # pod has them (in the container only), the API server in KUBERNETES_SERVICE_HOST/PORT.
    flags = [f"--secure-port={port}", *Knobs().common_flags(), *cloud.polyccm_args()]
    env = {**cloud.polyccm_env(), **incluster.service_env(incluster.server_of(kubeconfig))}
    stage = work / f"mounts-{provider}"
    stage.mkdir()
    mounts = readable_copies(host_files(flags, env, kubeconfig), stage)
    account = stage / "serviceaccount"
    shutil.copytree(incluster.account_of(kubeconfig), account)
    account.chmod(0o755)
    for name in account.iterdir():
        name.chmod(0o644)
    # The image's /var/run is a link to /run, which buildah's chroot isolation does not follow
    # for a volume's target: the directory it names.
    mounts[account] = "/run/secrets/kubernetes.io/serviceaccount"
    log = work / f"polyccm-{provider}.log"
    measured = []
    with Container(image) as container:
        for number in range(1, runs + 1):
            run = run_once(
                container, argv=[*entrypoint, *flags], env=env, mounts=mounts, port=port, log=log
            )
            say(f"{provider} run {number}: ready {run.ready_seconds:.2f} s after its start "
                f"({run.container_seconds:.2f} s after `buildah run`), "
                f"CPU {run.cpu_seconds:.2f} s, VmHWM {run.peak_rss_mib:.0f} MiB")  # fmt: skip
            measured.append(run)
    return measured


# -- the report -------------------------------------------------------------------------------


def write(results: Sequence[ImageResult], out: Path, command: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = {"command": command, "target_seconds": TARGET_SECONDS,
            "results": [asdict(r) for r in results]}  # fmt: skip
    json_path = out / "image.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# polyccm's start to ready in its image",
        "",
        f"`{command}`: each provider's image (`make image`), run with buildah (chroot "
        "isolation) against a local control plane and the provider's emulator, no nodes or "
        "Services; the benchmark's flags. *Ready*: from polyccm's process start to `/readyz` "
        "200 (target: under 1 s); *from `buildah run`* adds setting the container up; CPU "
        "(user and system) and VmHWM of polyccm's process at that moment. Medians of the "
        "runs; every run in image.json.",
        "",
        "| provider | image (unpacked) | runs | ready | from `buildah run` | CPU at ready "
        "| VmHWM at ready | under 1 s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        if result.failed or not result.runs:
            lines.append(f"| {result.provider} | | 0 | {result.failed or 'no run'} | | | | |")
            continue
        ready = result.median("ready_seconds") or 0.0
        lines.append(
            f"| {result.provider} | {result.image_bytes / 1e6:.0f} MB | {len(result.runs)} "
            f"| {ready:.2f} s "
            f"(min {min(r.ready_seconds for r in result.runs):.2f}, "
            f"max {max(r.ready_seconds for r in result.runs):.2f}) "
            f"| {result.median('container_seconds') or 0:.2f} s "
            f"| {result.median('cpu_seconds') or 0:.2f} s "
            f"| {result.median('peak_rss_mib') or 0:.0f} MiB "
            f"| {'yes' if ready < TARGET_SECONDS else 'NO'} |"
        )
    md_path = out / "image.md"
    md_path.write_text("\n".join(lines) + "\n")
    return [md_path, json_path]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.image",
        description="polyccm's start to ready and memory at ready, in each provider's image.",
    )
    parser.add_argument("--providers", default=",".join(CLOUDS))
    parser.add_argument("--runs", type=int, default=5, help="runs per provider (5)")
    parser.add_argument("--rebuild", action="store_true", help="build even when unchanged")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    args.providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in args.providers if p not in CLOUDS]
    if unknown or not args.providers:
        parser.error(f"unknown provider {', '.join(unknown) or '(none)'}; known: "
                     f"{', '.join(CLOUDS)}")  # fmt: skip
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from polyccm_testing.devenv import controlplane

    args = parse_args(argv)
    command = "python -m bench.image " + " ".join(sys.argv[1:] if argv is None else argv)
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: list[ImageResult] = []
    images: dict[str, tuple[str, int]] = {}
    for provider in args.providers:
        try:
            images[provider] = ensure_image(provider, rebuild=args.rebuild, logs=logs)
        except ImageError as error:
            say(f"{provider}: {error}")
            results.append(ImageResult(provider, "", 0, failed=f"not built: {error}"))
    with tempfile.TemporaryDirectory(prefix="polyccm-bench-image-") as name:
        work = Path(name)
        say(f"starting etcd, kube-apiserver and the {', '.join(images)} emulator(s)")
        for provider in images:
            os.environ.update(CLOUDS[provider].emulator_env)
        plane = controlplane.start(work / "plane", clouds=tuple(images), die_with_caller=True)
        try:
            admin = plane.kube_api(qps=0)
            cluster.ensure_namespace(admin)
            kubeconfig = cluster.make_identity(admin, IDENTITY, work, plane.ca_cert)
            for provider, (image, size) in images.items():
                cloud = CLOUDS[provider](plane.env, work)
                result = ImageResult(provider, image, size)
                try:
                    cloud.reset()
                    result.runs = measure(
                        provider, image, cloud, kubeconfig=kubeconfig, runs=args.runs, work=work
                    )
                except (RuntimeError, ImageError) as error:
                    say(f"{provider}: {error}")
                    result.failed = str(error).splitlines()[0]
                    if (work / f"polyccm-{provider}.log").exists():
                        shutil.copy(
                            work / f"polyccm-{provider}.log", logs / f"image-{provider}.log"
                        )
                finally:
                    cloud.close()
                results.append(result)
        finally:
            plane.stop()
    order = {p: i for i, p in enumerate(args.providers)}
    results.sort(key=lambda r: order[r.provider])
    paths = write(results, args.out, command.strip())
    say(f"results in {', '.join(str(p) for p in paths)}")
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
