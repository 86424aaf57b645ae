"""``python -m polyccm_testing.images``: ``build PROVIDER [--arch ARCH]`` (``make image``),
``sbom PROVIDER`` (``make sbom``) and ``tools`` (``make image-tools``). Errors are one line; an
unknown provider or architecture exits 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from polyccm_testing.images.arch import ARCHES, UnknownArch, check_arch
from polyccm_testing.images.build import (
    DIST,
    UnknownProvider,
    archive_path,
    build_image,
    check_provider,
)
from polyccm_testing.images.sbom import sbom_path, write_sbom
from polyccm_testing.images.tools import ImageError, ToolsMissing, ensure_tools


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polyccm_testing.images",
        description="Build polyccm's per-provider images with buildah, without a Docker engine.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build PROVIDER's image as an OCI archive")
    build.add_argument("provider", metavar="PROVIDER")
    build.add_argument("--output", type=Path, default=DIST, help="directory of the archive")
    build.add_argument("--tag", default="dev", help="tag of the local image (default: dev)")
    build.add_argument(
        "--arch",
        help=f"build for this architecture ({', '.join(ARCHES)}; default: this machine's, and"
        " the names carry no architecture)",
    )
    sbom = commands.add_parser("sbom", help="write PROVIDER's SBOM without building the image")
    sbom.add_argument("provider", metavar="PROVIDER")
    sbom.add_argument("--output", type=Path, default=DIST, help="directory of the SBOM")
    sbom.add_argument("--arch", help="name it for this architecture's archive")
    tools = commands.add_parser("tools", help="install buildah and debootstrap if missing")
    tools.add_argument(
        "--if-possible",
        action="store_true",
        help="when they cannot be installed, say so and succeed (the image tests then skip)",
    )
    options = parser.parse_args(argv)
    try:
        if options.command == "tools":
            ensure_tools()
            return 0
        if options.arch is not None:
            check_arch(options.arch)
        if options.command == "sbom":
            check_provider(options.provider)
            archive = archive_path(options.output, options.provider, options.arch)
            print(write_sbom(options.provider, sbom_path(archive)))
            return 0
        built = build_image(
            options.provider, output=options.output, tag=options.tag, arch=options.arch
        )
    except (UnknownProvider, UnknownArch) as error:
        print(f"polyccm images: {error}", file=sys.stderr)
        return 2
    except ToolsMissing as error:
        if options.command == "tools" and options.if_possible:
            print(f"polyccm images: {error}; the image tests will be skipped", file=sys.stderr)
            return 0
        print(f"polyccm images: {error}", file=sys.stderr)
        return 1
    except ImageError as error:
        print(f"polyccm images: {error}", file=sys.stderr)
        return 1
    print(built.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
