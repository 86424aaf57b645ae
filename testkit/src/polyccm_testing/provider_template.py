"""The provider template behind ``polyccm-dev new-provider NAME``.

``templates/provider`` holds a provider distribution shaped like ``providers/aws``, with its
emulator distribution beside it in ``emulator/`` (the provider's wheel holds only what runs in a
cluster). Files ending in ``.tmpl`` are rendered with :class:`string.Template` (``$name``,
``$package``, ``$distribution``, ``$emulator_package``, ``$emulator_distribution``, ``$title``,
``$upper``), the folder ``src/package`` becomes ``src/polyccm_NAME`` and ``emulator/src/package``
``emulator/src/polyccm_NAME_emulator``, and other files are copied as they are. Nothing is
written when any of the files already exists, so an author's work is never overwritten.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import tomllib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from string import Template

TEMPLATE = ("templates", "provider")
"""Where the template lives inside the ``polyccm_testing`` package."""
SUFFIX = ".tmpl"
PACKAGE_FOLDER = PurePosixPath("src", "package")
EMULATOR_PACKAGE_FOLDER = PurePosixPath("emulator", "src", "package")

RESERVED = frozenset({"fake"})
"""Provider names taken without an entry point: ``fake`` is the FakeCloud's (``fake_main``)."""

MAX_NAME_LENGTH = 20
"""Longer names would push generated lines past the project's line length (and upstream's
provider names are short: ``aws``, ``digitalocean``)."""
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class TemplateError(Exception):
    """A name or destination the template refuses; the message is one line."""


@dataclass(frozen=True)
class ProviderNames:
    """The names one provider name implies, as the template spells them."""

    name: str
    """The provider name (``--provider NAME``, the entry-point name): ``my_cloud``."""

    @property
    def package(self) -> str:
        """The import package: ``polyccm_my_cloud``."""
        return f"polyccm_{self.name}"

    @property
    def distribution(self) -> str:
        """The distribution, in its normalised form: ``polyccm-my-cloud``."""
        return f"polyccm-{self.name.replace('_', '-')}"

    @property
    def emulator_package(self) -> str:
        """The emulator's import package: ``polyccm_my_cloud_emulator``."""
        return f"{self.package}_emulator"

    @property
    def emulator_distribution(self) -> str:
        """The emulator's distribution: ``polyccm-my-cloud-emulator``."""
        return f"{self.distribution}-emulator"

    @property
    def title(self) -> str:
        """The prefix of the class names: ``MyCloud`` (``MyCloudProvider``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    def substitutions(self) -> dict[str, str]:
        return {
            "name": self.name,
            "package": self.package,
            "distribution": self.distribution,
            "emulator_package": self.emulator_package,
            "emulator_distribution": self.emulator_distribution,
            "title": self.title,
            "upper": self.name.upper(),
        }


def check_name(name: str, taken: Collection[str]) -> ProviderNames:
    """``name`` as a new provider's names, or :class:`TemplateError` saying why it cannot be:
    not a lowercase identifier, or a provider (``taken``: the registered names) or package that
    already exists."""
    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise TemplateError(
            f"{name!r} is not a provider name: use a lowercase identifier "
            "(a-z, 0-9 and _, starting with a letter), such as mycloud"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise TemplateError(
            f"{name!r} is too long for a provider name: use at most {MAX_NAME_LENGTH} characters"
        )
    if name in taken or name in RESERVED:
        raise TemplateError(f"provider {name!r} already exists; choose another name")
    names = ProviderNames(name)
    for package in (names.package, names.emulator_package):
        if importlib.util.find_spec(package) is not None:
            raise TemplateError(f"a package {package} is already installed; choose another name")
    return names


def _template_files(
    folder: Traversable, relative: PurePosixPath
) -> Iterator[tuple[PurePosixPath, Traversable]]:
    for entry in folder.iterdir():
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            yield from _template_files(entry, relative / entry.name)
        else:
            yield relative / entry.name, entry


def render(names: ProviderNames) -> dict[PurePosixPath, str]:
    """Every file of the new distribution, by path relative to its root."""
    root = files("polyccm_testing").joinpath(*TEMPLATE)
    rendered: dict[PurePosixPath, str] = {}
    for relative, source in sorted(_template_files(root, PurePosixPath()), key=lambda f: f[0]):
        target = relative
        if relative.is_relative_to(PACKAGE_FOLDER):
            target = PurePosixPath("src", names.package) / relative.relative_to(PACKAGE_FOLDER)
        elif relative.is_relative_to(EMULATOR_PACKAGE_FOLDER):
            inside = relative.relative_to(EMULATOR_PACKAGE_FOLDER)
            target = PurePosixPath("emulator", "src", names.emulator_package) / inside
        text = source.read_text(encoding="utf-8")
        if target.name.endswith(SUFFIX):
            target = target.with_name(target.name.removesuffix(SUFFIX))
            text = Template(text).substitute(names.substitutions())
        rendered[target] = text
    return rendered


def write_provider(names: ProviderNames, destination: Path) -> list[Path]:
    """Write the new distribution into ``destination``; return the files written. Refuses,
    writing nothing, when any of them exists."""
    rendered = render(names)
    existing = [
        destination / relative for relative in rendered if (destination / relative).exists()
    ]
    if existing:
        raise TemplateError(
            f"{existing[0]} already exists; nothing was written (the template never overwrites)"
        )
    written: list[Path] = []
    for relative, text in rendered.items():
        path = destination / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as file:  # "x": a file that appeared meanwhile stays
            file.write(text)
        written.append(path)
    return written


def find_workspace(start: Path) -> Path | None:
    """The polyccm workspace root at or above ``start``: the first ``pyproject.toml`` that
    declares a uv workspace with a ``providers/*`` member; ``None`` outside one."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            continue
        members = config.get("tool", {}).get("uv", {}).get("workspace", {}).get("members", [])
        if "providers/*" in members:
            return folder
    return None
