"""A package installed by polyccm.lazypackage runs none of its ``__init__``: each name loads, on
first read, from the module that ``__init__`` names (relative imports, parenthesised lists,
``as`` aliases and submodules alike), and a name it does not export is an AttributeError."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from polyccm import lazypackage

INIT = """
import sys
sys.modules[__name__ + "._ran"] = sys  # marks that the __init__ ran
from .light import (
    Light,
    other as Renamed,
)
from .heavy import Heavy
from lazypkg_demo.sub import helper
from . import light as light_module
"""


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "lazypkg_demo"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(INIT)
    (root / "light.py").write_text("class Light: pass\nother = 1\n")
    (root / "heavy.py").write_text("class Heavy: pass\n")
    (root / "sub" / "__init__.py").write_text("raise RuntimeError('sub __init__ ran')\n")
    (root / "sub" / "helper.py").write_text("VALUE = 7\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield "lazypkg_demo"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("lazypkg_demo")]:
            del sys.modules[name]


def loaded() -> list[str]:
    return sorted(m for m in sys.modules if m.startswith("lazypkg_demo."))


def test_names_load_one_by_one_from_the_modules_the_init_names(package: str) -> None:
    assert lazypackage.install((package, f"{package}.sub"))
    import lazypkg_demo

    assert loaded() == ["lazypkg_demo.sub"]  # installed; neither __init__ ran
    assert lazypkg_demo.Light.__module__ == "lazypkg_demo.light"
    assert lazypkg_demo.Renamed == 1
    assert loaded() == ["lazypkg_demo.light", "lazypkg_demo.sub"]
    assert lazypkg_demo.helper.VALUE == 7  # ``from package import submodule``
    assert lazypkg_demo.light_module is sys.modules["lazypkg_demo.light"]
    assert "lazypkg_demo.heavy" not in sys.modules
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        lazypkg_demo.Nothing  # noqa: B018
    assert lazypackage.install((package,))  # again: still lazy


def test_a_package_imported_whole_is_left_as_it_is(package: str) -> None:
    (Path(sys.path[0]) / package / "sub" / "__init__.py").write_text("")
    import lazypkg_demo

    assert "lazypkg_demo._ran" in sys.modules
    assert not lazypackage.install((package,))
    assert sys.modules[package] is lazypkg_demo


def test_a_missing_package_is_not_installed() -> None:
    assert not lazypackage.install(("lazypkg_absent_demo",))
    assert "lazypkg_absent_demo" not in sys.modules


def test_a_name_the_init_lists_but_its_module_lacks_is_an_attribute_error(package: str) -> None:
    # google-cloud-compute's ``types.compute`` built with fewer classes (polyccm_gce.compute_types)
    # than compute_v1's __init__ names: hasattr() must say False, not raise ImportError.
    (Path(sys.path[0]) / package / "light.py").write_text("class Light: pass\n")  # no ``other``
    assert lazypackage.install((package,))
    import lazypkg_demo

    assert not hasattr(lazypkg_demo, "Renamed")
    with pytest.raises(AttributeError, match="has no attribute 'Renamed'"):
        lazypkg_demo.Renamed  # noqa: B018
    assert lazypkg_demo.Light.__name__ == "Light"


def test_a_submodule_that_fails_to_import_a_module_it_needs_says_so(package: str) -> None:
    (Path(sys.path[0]) / package / "sub" / "helper.py").write_text("import lazypkg_nowhere\n")
    assert lazypackage.install((package, f"{package}.sub"))
    import lazypkg_demo

    with pytest.raises(ModuleNotFoundError, match="lazypkg_nowhere"):
        lazypkg_demo.helper  # noqa: B018
