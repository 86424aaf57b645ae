"""pytest plugin (entry point ``polyccm_controlplane``): a real etcd + kube-apiserver for tests.

Fixtures:

* ``control_plane`` (session): a :class:`polyccm_testing.devenv.controlplane.ControlPlane`
  started in a temporary state dir and stopped when the session ends. When
  ``POLYCCM_TEST_STATE_DIR`` names a state dir brought up with ``polyccm-dev up``, that one is
  used and left running.
* ``kube_api`` (session): an admin :class:`polyccm.kube.api.KubeApi` for it (no rate limit).
* ``namespace`` (function): a fresh ``test-<random>`` namespace, deleted with its contents after.
* ``clean_nodes`` (function): deletes every Node before and after the test.

A control plane that cannot start fails the tests that need it, loudly; they are never skipped.
Tests using these fixtures get the ``controlplane`` marker, so ``-m "not controlplane"`` leaves
them out. Importing this module imports nothing heavy and starts nothing.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from polyccm.kube.api import KubeApi

    from polyccm_testing.devenv.controlplane import ControlPlane

STATE_DIR_VARIABLE = "POLYCCM_TEST_STATE_DIR"
MARKER = "controlplane"
_FIXTURES = frozenset({"control_plane", "kube_api", "namespace", "clean_nodes"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: needs the real kube-apiserver and etcd (started once per session)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(MARKER)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A running control plane for the whole session."""
    from polyccm_testing.devenv import controlplane

    reuse = os.environ.get(STATE_DIR_VARIABLE)
    if reuse:
        try:
            attached = controlplane.attach(Path(reuse))
        except controlplane.ControlPlaneError as error:
            pytest.fail(f"{STATE_DIR_VARIABLE}={reuse}: {error}", pytrace=False)
        if attached is None:
            pytest.fail(
                f"{STATE_DIR_VARIABLE}={reuse} is not up: run `polyccm-dev up --state-dir "
                f"{reuse}` first, or unset {STATE_DIR_VARIABLE} to start one per session",
                pytrace=False,
            )
        yield attached
        return
    state_dir = tmp_path_factory.mktemp("polyccm-controlplane")
    try:
        # Tied to this process: a session killed before its clean-up leaves nothing running.
        plane = controlplane.start(state_dir, die_with_caller=True)
    except controlplane.ControlPlaneError as error:
        pytest.fail(f"the control plane did not start: {error}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> Iterator[KubeApi]:
    """Admin access to the control plane, without client-side rate limiting."""
    api = control_plane.kube_api(qps=0.0, user_agent="polyccm-tests")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(kube_api: KubeApi) -> Iterator[str]:
    """The name of a namespace created for this test and deleted (contents too) after it."""
    from polyccm.kube.api import NAMESPACES

    from polyccm_testing.devenv.cleanup import delete_namespace

    name = f"test-{secrets.token_hex(4)}"
    kube_api.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    try:
        yield name
    finally:
        delete_namespace(kube_api, name)


@pytest.fixture
def clean_nodes(kube_api: KubeApi) -> Iterator[None]:
    """No Node objects before the test, and none left after it."""
    from polyccm_testing.devenv.cleanup import delete_all_nodes

    delete_all_nodes(kube_api)
    try:
        yield
    finally:
        delete_all_nodes(kube_api)
