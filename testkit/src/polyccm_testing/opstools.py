"""Test support for the operator commands (``polyccm plan``, ``orphans``, ``check-service``).

:func:`run_polyccm` runs the real ``polyccm`` command in this process and captures what it
prints, so a test can arrange a cloud (the fake one, or an emulator) and read the command's
answer and exit status; :func:`run_command` adds the usual flags, :func:`plans_by_service` and
:func:`listed_orphans` read the ``-o json`` answers. :func:`read_only_kubeconfig` gives the
command a ServiceAccount that may only get, list and watch nodes and services (and read what
else a provider needs): a command run with it that tried to write to the cluster would fail
(403), which is how the tests prove it writes nothing there. :func:`malformed_manifests` and
:func:`unreadable_files` give what ``check-service`` must refuse in one line, and
:func:`unanswering_api_servers` kubeconfigs for API servers that never answer (a closed port, a
socket that accepts and stays silent).
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import secrets
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from polyccm.cli import main
from polyccm.kube.api import KubeApi, load_configuration
from polyccm.plugins import plugin_manager

from polyccm_testing.kubeobjects import (
    allowed,
    bind_role,
    make_cluster_role,
    make_role,
    make_service_account,
    service_account_kubeconfig,
    wait_for,
)

if TYPE_CHECKING:
    from polyccm_testing.devenv.controlplane import ControlPlane

Rule = dict[str, Any]
"""One rule of a Role or ClusterRole (``apiGroups``, ``resources``, ``verbs``, optionally
``resourceNames``)."""

READ_ONLY_RULES: list[Rule] = [
    {"apiGroups": [""], "resources": ["nodes", "services"], "verbs": ["get", "list", "watch"]}
]
"""All ``polyccm plan`` and ``polyccm orphans`` need of the cluster."""


@dataclass(frozen=True)
class CommandResult:
    """What one run of the command printed, and its exit status."""

    status: int
    stdout: str
    stderr: str


@contextmanager
def _process_state() -> Iterator[None]:
    """Give back what the command sets up for a process of its own (logging level, exception
    hooks), so that running it in a test leaves the test process as it was."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    hooks = (sys.excepthook, threading.excepthook)
    try:
        yield
    finally:
        root.setLevel(level)
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        sys.excepthook, threading.excepthook = hooks


def run_polyccm(
    argv: Sequence[str], *, plugins: Sequence[object] = (), stdin: str = ""
) -> CommandResult:
    """Run ``polyccm ARGV`` in this process with the installed plugins (plus ``plugins``,
    e.g. a :class:`~polyccm_testing.fake_main.FakeCloudPlugin` holding an arranged cloud),
    ``stdin`` as its standard input; return its exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with _process_state(), redirect_stdout(out), redirect_stderr(err):
            status = main(list(argv), plugin_manager(list(plugins)))
    finally:
        sys.stdin = saved_stdin
    return CommandResult(status, out.getvalue(), err.getvalue())


def run_command(
    command: str,
    provider: str,
    kubeconfig: Path | str,
    *extra: str,
    cloud_config: Path | None = None,
    plugins: Sequence[object] = (),
    stdin: str = "",
) -> CommandResult:
    """``polyccm COMMAND --provider=PROVIDER --kubeconfig=KUBECONFIG
    [--cloud-config=CLOUD_CONFIG] EXTRA...``, run as :func:`run_polyccm` runs it."""
    argv = [command, f"--provider={provider}", f"--kubeconfig={kubeconfig}"]
    if cloud_config is not None:
        argv.append(f"--cloud-config={cloud_config}")
    return run_polyccm([*argv, *extra], plugins=plugins, stdin=stdin)


QUICK_TIMEOUT = "0.5s"
"""The ``--request-timeout`` the unanswering-server tests pass (so a silent server costs half a
second), as it is written on the command line and in the message."""


class Unanswering(NamedTuple):
    """An API server that gives no answer, and what the commands must say of it."""

    kubeconfig: Path
    server: str
    """The URL the kubeconfig names."""
    cause: str
    """The end of the one line: why there is no answer."""


def _kubeconfig(directory: Path, name: str, server: str) -> Path:
    path = directory / f"{name}.kubeconfig"
    cluster = {"server": server, "insecure-skip-tls-verify": True}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": "not-used"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(json.dumps(config))
    return path


@contextmanager
def unanswering_api_servers(directory: Path) -> Iterator[list[Unanswering]]:
    """Kubeconfigs (written in ``directory``) for three loopback API servers that never
    answer: a port nothing listens on, and a socket that accepts connections and never says
    a word, once for https and once for http. The silent socket lives as long as the block."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    # Listening is enough: the kernel completes each handshake; nothing ever reads or writes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        late = f"no answer within {QUICK_TIMEOUT} (--request-timeout)"
        servers = {
            "refused": (f"https://127.0.0.1:{closed}", "cannot connect: connection refused"),
            "silent-https": (f"https://127.0.0.1:{port}", late),
            "silent-http": (f"http://127.0.0.1:{port}", late),
        }
        yield [
            Unanswering(_kubeconfig(directory, name, url), url, cause)
            for name, (url, cause) in servers.items()
        ]


class Malformed(NamedTuple):
    """A manifest ``check-service`` must refuse in one line (exit 2)."""

    path: Path
    message: str
    """What the line says after ``polyccm check-service: error: PATH: ``."""


def _service(annotations: Mapping[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "annotations": dict(annotations)},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], **spec},
    }


def clean_manifest(directory: Path) -> Path:
    """A manifest (written in ``directory``) of one LoadBalancer Service every provider takes."""
    path = directory / "clean-service.json"
    path.write_text(json.dumps(_service({})))
    return path


def malformed_manifests(directory: Path, annotation: str) -> dict[str, Malformed]:
    """Manifests (written in ``directory``) with what the API server would refuse, or no
    reader should take, each with the end of the line that must refuse it; ``annotation`` is
    one the provider reads, given a list and then a number. By case name."""
    from polyccm.ops.check import MAX_MANIFEST_BYTES, MAX_SERVICES

    as_list = _service({annotation: ["a", "b"]})
    as_number = _service({annotation: 5})
    metadata = {**_service({}), "metadata": 5}
    cases: dict[str, tuple[str, str]] = {
        "ports-a-string": (
            json.dumps(_service({}, ports="abc")),
            'Service "web" is invalid: spec.ports: Invalid value: "abc": must be a list',
        ),
        "port-a-word": (
            json.dumps(_service({}, ports=[{"port": "eighty"}])),
            'Service "web" is invalid: spec.ports[0].port: Invalid value: "eighty": '
            "must be an integer",
        ),
        "annotation-a-list": (
            json.dumps(as_list),
            f'Service "web" is invalid: metadata.annotations[{annotation}]: '
            'Invalid value: ["a", "b"]: must be a string',
        ),
        "annotation-a-number": (
            json.dumps(as_number),
            f'Service "web" is invalid: metadata.annotations[{annotation}]: '
            "Invalid value: 5: must be a string",
        ),
        "metadata-a-number": (
            json.dumps(metadata),
            "the Service in document 1 is invalid: metadata: Invalid value: 5: must be an object",
        ),
        "list-of-scalars": (
            json.dumps({"apiVersion": "v1", "kind": "List", "items": [_service({}), 1, "x"]}),
            "document 1: items[1] is not an object: 1",
        ),
        "nested-100000-deep": (
            "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: "
            + "[" * 100_000
            + "]" * 100_000
            + "}\n",
            "nested deeper than 100 levels",
        ),
        "too-many-services": (
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": [_service({}) for _ in range(MAX_SERVICES + 1)],
                }
            ),
            f"{MAX_SERVICES + 1} Services; check-service checks at most {MAX_SERVICES} at once "
            "(split the file)",
        ),
    }
    written = {}
    for name, (text, message) in cases.items():
        path = directory / f"{name}.yaml"
        path.write_text(text)
        written[name] = Malformed(path, message)
    # Past the bound: a Service with one scalar of the whole size, never read whole.
    huge = directory / "huge-scalar.yaml"
    with huge.open("w") as stream:
        stream.write("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  x: ")
        stream.write("a" * MAX_MANIFEST_BYTES)
    written["huge-scalar"] = Malformed(
        huge, f"manifest is larger than {MAX_MANIFEST_BYTES >> 20} MiB, the most polyccm reads"
    )
    return written


def unreadable_files(directory: Path, what: str) -> dict[str, Malformed]:
    """Files no reader of a ``what`` (``cloud config``...) should take, each with the end of
    the one line that must refuse it: bytes that are not UTF-8, a directory, a missing file,
    and one past :data:`polyccm.inputs.MAX_FILE_BYTES`. By case name."""
    from polyccm.inputs import MAX_FILE_BYTES

    binary = directory / "binary.conf"
    binary.write_bytes(b"[Global]\n\xff\xfe\x00\x9c garbage")
    folder = directory / "a-directory"
    folder.mkdir(exist_ok=True)
    large = directory / "large.conf"
    large.write_text("[Global]\n" + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    return {
        "not-utf8": Malformed(binary, f"{what} is not UTF-8 text (byte 0xff at offset 9)"),
        "directory": Malformed(folder, f"cannot read {what}: Is a directory"),
        "missing": Malformed(
            directory / "missing", f"cannot read {what}: No such file or directory"
        ),
        "too-large": Malformed(
            large, f"{what} is larger than {MAX_FILE_BYTES >> 20} MiB, the most polyccm reads"
        ),
    }


def assert_refused(result: CommandResult, command: str, case: Malformed, name: str = "") -> None:
    """``result`` is the one line, exit 2, that refuses ``case``: it names the file first and
    ends with the case's message."""
    lines = result.stderr.splitlines()
    assert (result.status, result.stdout, len(lines)) == (2, "", 1), (name, result.stderr[:2000])
    prefix = f"polyccm {command}: error: {case.path}"
    assert lines[0].startswith(prefix), (name, lines[0][:500])
    assert lines[0].endswith(case.message), (name, lines[0][:500])


def plans_by_service(result: CommandResult, namespace: str = "") -> dict[str, dict[str, Any]]:
    """The load-balancer plans ``polyccm plan -o json`` printed, by service name (only those
    of ``namespace`` when given)."""
    document = json.loads(result.stdout)
    return {
        plan["service"].split("/")[1]: plan
        for plan in document["loadBalancers"]
        if not namespace or plan["service"].startswith(f"{namespace}/")
    }


def listed_orphans(result: CommandResult) -> list[dict[str, Any]]:
    """The resources ``polyccm orphans -o json`` printed."""
    found: list[dict[str, Any]] = json.loads(result.stdout)["orphans"]
    return found


def read_only_kubeconfig(
    api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    directory: Path,
    *,
    rules: Sequence[Rule] = (),
    namespaced: Mapping[str, Sequence[Rule]] | None = None,
) -> Path:
    """A kubeconfig for a new ServiceAccount in ``namespace`` whose only rights are get, list
    and watch on nodes and services (:data:`READ_ONLY_RULES`) and ``rules`` in every namespace,
    and in each namespace of ``namespaced`` its rules there (a Role and RoleBinding), with a
    TokenRequest token. Returns once the API server's authorizer grants all of them (a new
    binding takes a moment to reach its RBAC cache). The grants outlive ``namespace``, so their
    names are unique."""
    name = f"polyccm-read-only-{secrets.token_hex(3)}"
    everywhere = [*READ_ONLY_RULES, *rules]
    granted = {"": everywhere, **(namespaced or {})}
    make_cluster_role(api, name, everywhere)
    make_service_account(api, namespace, name, cluster_role=name)
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    for where, where_rules in (namespaced or {}).items():
        make_role(api, where, name, list(where_rules))
        bind_role(api, where, name, name, subject)
    path = service_account_kubeconfig(api, control_plane, directory, namespace=namespace, name=name)
    checks = [attributes for where, some in granted.items() for attributes in _checks(some, where)]
    as_account = KubeApi(load_configuration(str(path)))
    try:
        wait_for(
            lambda: all(allowed(as_account, attributes) for attributes in checks),
            what=f"the authorizer to grant ServiceAccount {namespace}/{name} its rules",
        )
    finally:
        as_account.close()
    return path


def _checks(rules: Sequence[Rule], namespace: str) -> Iterator[dict[str, str]]:
    """The access reviews (``resourceAttributes``) that together ask for every grant of
    ``rules`` in ``namespace`` (all namespaces when empty)."""
    for rule in rules:
        for group, resource, verb, name in itertools.product(
            rule.get("apiGroups") or [""],
            rule["resources"],
            rule["verbs"],
            rule.get("resourceNames") or [""],
        ):
            yield {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
                "name": name,
            }
