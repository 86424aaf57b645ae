"""``polyccm check-service``: a manifest checked offline by the provider's own validation (the
fake provider's here), one line per problem, exit 1 with problems, 0 without, 2 for bad input;
and no cloud call at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm import cloudcalls
from polyccm.kube.api import SERVICES, ApiError, KubeApi
from polyccm.objects import Service
from polyccm.ops.check import completed
from polyccm_testing.fake import REFUSE_ANNOTATION, WARN_ANNOTATION, FakeCloud
from polyccm_testing.fake_main import FakeCloudPlugin
from polyccm_testing.opstools import (
    CommandResult,
    Malformed,
    assert_refused,
    malformed_manifests,
    run_polyccm,
    unreadable_files,
)

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {ANNOTATIONS}
spec:
  type: LoadBalancer
  ports: [{port: 80, targetPort: 8080}]
"""


def check(manifest: str, tmp_path: Path, *extra: str) -> CommandResult:
    path = tmp_path / "service.yaml"
    path.write_text(manifest)
    return run_polyccm(
        ["check-service", "--provider=fake", "-f", str(path), *extra],
        plugins=[FakeCloudPlugin(FakeCloud())],
    )


def check_file(path: Path, *extra: str) -> CommandResult:
    return run_polyccm(
        ["check-service", "--provider=fake", "-f", str(path), *extra],
        plugins=[FakeCloudPlugin(FakeCloud())],
    )


def test_a_clean_service_exits_0_silently(tmp_path: Path) -> None:
    result = check(MANIFEST.replace("{ANNOTATIONS}", "{}"), tmp_path)

    assert (result.status, result.stdout, result.stderr) == (0, "", "")


def test_each_problem_is_one_line_worded_as_the_controller_words_it(tmp_path: Path) -> None:
    annotations = f'{{"{REFUSE_ANNOTATION}": "x"}}'
    result = check(MANIFEST.replace("{ANNOTATIONS}", annotations), tmp_path)

    assert result.status == 1
    assert result.stdout == (
        f"default/web: error: annotation {REFUSE_ANNOTATION}='x': refused as asked\n"
    )


def test_warnings_count_as_problems(tmp_path: Path) -> None:
    annotations = f'{{"{WARN_ANNOTATION}": "odd"}}'
    result = check(MANIFEST.replace("{ANNOTATIONS}", annotations), tmp_path)

    assert result.status == 1
    assert result.stdout == (
        f"default/web: warning: annotation {WARN_ANNOTATION}='odd': warned as asked\n"
    )


def test_stdin_as_kubectl_takes_it() -> None:
    manifest = MANIFEST.replace("{ANNOTATIONS}", f'{{"{REFUSE_ANNOTATION}": "x"}}')
    result = run_polyccm(
        ["check-service", "--provider=fake", "-f", "-"],
        plugins=[FakeCloudPlugin(FakeCloud())],
        stdin=manifest,
    )

    assert result.status == 1
    assert result.stdout.startswith("default/web: error:")


def test_services_that_get_no_load_balancer_are_passed_over(tmp_path: Path) -> None:
    manifest = MANIFEST.replace("{ANNOTATIONS}", f'{{"{REFUSE_ANNOTATION}": "x"}}')
    result = check(manifest.replace("type: LoadBalancer", "type: ClusterIP"), tmp_path)

    assert (result.status, result.stdout) == (0, "")


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("kind: [", "service.yaml:1: "),
        ("apiVersion: v1\nkind: ConfigMap\n", "no Service (apiVersion v1) in it"),
        (
            "apiVersion: v1\nkind: Service\nspec: {}\n",
            "metadata.name: Required value: name or generateName is required",
        ),
    ],
)
def test_bad_manifests_are_one_line_and_exit_2(manifest: str, message: str, tmp_path: Path) -> None:
    result = check(manifest, tmp_path)

    assert result.status == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_flags_and_unknown_providers_exit_2(tmp_path: Path) -> None:
    fake = [FakeCloudPlugin(FakeCloud())]
    missing = run_polyccm(
        ["check-service", "--provider=fake", "-f", str(tmp_path / "none")], plugins=fake
    )
    unknown = run_polyccm(["check-service", "--provider=nope", "-f", "-"], plugins=fake)
    no_file = run_polyccm(["check-service", "--provider=fake"], plugins=fake)

    assert missing.status == unknown.status == no_file.status == 2
    assert "cannot read" in missing.stderr
    assert "the following arguments are required: -f/--filename" in no_file.stderr
    assert "unknown provider 'nope'" in unknown.stderr


class SilentPlugin(FakeCloudPlugin):
    """The fake provider without an offline check."""

    def polyccm_build_service_checker(self, settings: object) -> None:
        return None


def test_a_provider_without_a_checker_is_not_supported(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    path.write_text(MANIFEST.replace("{ANNOTATIONS}", "{}"))

    result = run_polyccm(
        ["check-service", "--provider=fake", "-f", str(path)], plugins=[SilentPlugin()]
    )

    assert result.status == 2
    assert result.stderr == "polyccm check-service: error: not supported by provider fake\n"


def test_no_cloud_call_is_made(tmp_path: Path) -> None:
    before = cloudcalls.calls_made("fake")

    check(MANIFEST.replace("{ANNOTATIONS}", f'{{"{REFUSE_ANNOTATION}": "x"}}'), tmp_path)

    assert cloudcalls.calls_made("fake") == before


def test_the_manifest_is_completed_as_the_api_server_would() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443, "nodePort": 31443}]},
    }

    service = Service(completed(raw))

    assert service.key == "default/web"
    assert service.uid
    assert [(p.protocol, p.node_port) for p in service.ports] == [("TCP", 30000), ("TCP", 31443)]
    assert raw["metadata"] == {"name": "web"}  # the input is left as written
    unallocated = {**raw, "spec": {**raw["spec"], "allocateLoadBalancerNodePorts": False}}
    assert [p.node_port for p in Service(completed(unallocated)).ports] == [0, 31443]


# -- bad input: one line, exit 2, before any provider check ----------------------------------------


def test_malformed_manifests_are_one_line_naming_the_file(tmp_path: Path) -> None:
    for name, case in malformed_manifests(tmp_path, REFUSE_ANNOTATION).items():
        result = check_file(case.path)

        assert_refused(result, "check-service", case, name)


def test_unreadable_manifests_are_one_line_naming_the_file_and_cause(tmp_path: Path) -> None:
    for name, case in unreadable_files(tmp_path, "manifest").items():
        if name == "too-large":
            continue  # a manifest's bound is larger: malformed_manifests has it
        result = check_file(case.path)

        assert_refused(result, "check-service", case, name)


def test_an_unreadable_cloud_config_is_one_line_whatever_the_provider_makes_of_it(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "service.yaml"
    manifest.write_text(MANIFEST.replace("{ANNOTATIONS}", "{}"))
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        result = check_file(manifest, f"--cloud-config={case.path}")

        assert_refused(result, "check-service", case, name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: Service\nkind: Service\n", ":3: duplicate key 'kind'"),
        ('{"apiVersion": "v1", "kind": "Service", "kind": "List"}', ": duplicate key 'kind'"),
        ('{"apiVersion": "v1", "kind": "Service", "spec": {"x": NaN}}', ": not JSON: NaN"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", ": nested deeper than 100 levels"),
        ("- 1\n---\napiVersion: v1\n", ": document 1 is not an object: [1]"),
        ("apiVersion: v1\nkind: List\nitems: 5\n", ": document 1: items: must be a list: 5"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("abcdefgh", "bcdefghi", strict=True)
            ),
            ": aliases expand the document beyond any real one",
        ),
    ],
    ids=["yaml-key-twice", "json-key-twice", "nan", "json-deep", "scalar-doc", "items", "bomb"],
)
def test_documents_no_reader_should_take_are_one_line(
    text: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "service.yaml"
    path.write_text(text)

    result = check_file(path)

    assert_refused(result, "check-service", Malformed(path, message))


API_SERVER_REFUSES = {
    "ports-a-string": (
        {"spec": {"ports": "abc"}},
        'spec.ports: Invalid value: "abc": must be a list',
    ),
    "port-a-word": (
        {"ports": [{"port": "eighty"}]},
        'spec.ports[0].port: Invalid value: "eighty": must be an integer',
    ),
    "port-a-fraction": (
        {"ports": [{"port": 80.5}]},
        "spec.ports[0].port: Invalid value: 80.5: must be an integer",
    ),
    "port-out-of-range": (
        {"ports": [{"port": 70000}]},
        "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
    ),
    "port-an-item-string": (
        {"ports": ["x"]},
        'spec.ports[0]: Invalid value: "x": must be an object',
    ),
    "node-port-a-word": (
        {"ports": [{"port": 80, "nodePort": "x"}]},
        'spec.ports[0].nodePort: Invalid value: "x": must be an integer',
    ),
    "protocol-unknown": (
        {"ports": [{"port": 80, "protocol": "HTTP"}]},
        'spec.ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"',
    ),
    "no-ports": ({"ports": []}, "spec.ports: Required value"),
    "unnamed-ports": (
        {"ports": [{"port": 80}, {"port": 443}]},
        "[spec.ports[0].name: Required value, spec.ports[1].name: Required value]",
    ),
    "type-unknown": (
        {"type": "Balanced"},
        'spec.type: Unsupported value: "Balanced": supported values: '
        '"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
    ),
    "flag-a-word": (
        {"allocateLoadBalancerNodePorts": "no"},
        'spec.allocateLoadBalancerNodePorts: Invalid value: "no": must be a boolean',
    ),
    "ranges-a-string": (
        {"loadBalancerSourceRanges": "10.0.0.0/8"},
        'spec.loadBalancerSourceRanges: Invalid value: "10.0.0.0/8": must be a list',
    ),
    "annotation-a-list": (
        {"annotations": {"x": ["a"]}},
        'metadata.annotations[x]: Invalid value: ["a"]: must be a string',
    ),
    "annotation-true": (
        {"annotations": {"x": True}},
        "metadata.annotations[x]: Invalid value: true: must be a string",
    ),
    "annotations-too-large": (
        {"annotations": {"x": "v" * 300_000}},
        "metadata.annotations: Too long: may not be more than 262144 bytes",
    ),
    "annotation-key-bad": (
        {"annotations": {"a b": "x"}},
        'metadata.annotations: Invalid value: "a b": name part must consist of alphanumeric '
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character",
    ),
    "name-upper-case": (
        {"name": "Web"},
        'metadata.name: Invalid value: "Web": a DNS-1035 label must consist of lower case '
        "alphanumeric characters or '-', start with an alphabetic character, and end with an "
        "alphanumeric character",
    ),
    "metadata-a-number": ({"metadata": 5}, "metadata: Invalid value: 5: must be an object"),
    "spec-a-list": ({"spec": []}, "spec: Invalid value: []: must be an object"),
}


def _bad_service(change: dict[str, Any]) -> dict[str, Any]:
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }
    for key, value in change.items():
        if key in ("metadata", "spec"):
            service[key] = value
        elif key in ("name", "annotations"):
            service["metadata"][key] = value
        else:
            service["spec"][key] = value
    return service


@pytest.mark.parametrize("case", sorted(API_SERVER_REFUSES))
def test_a_service_the_api_server_refuses_is_one_line_before_any_provider_check(
    case: str, kube_api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    # The reference is the API server itself (kube-apiserver v1.35.4, dry run): each of these
    # it refuses too, by a decoding error (a wrong type) or a field error whose wording
    # (k8s.io/apimachinery pkg/util/validation/field/errors.go: Invalid, NotSupported, Required,
    # TooLong) the one line repeats.
    change, message = API_SERVER_REFUSES[case]
    service = _bad_service(change)
    path = tmp_path / "service.json"
    path.write_text(json.dumps(service))
    cloud = FakeCloud()

    result = run_polyccm(
        ["check-service", "--provider=fake", "-f", str(path)], plugins=[FakeCloudPlugin(cloud)]
    )

    named = f'Service "{change.get("name", "web")}"'
    if case == "metadata-a-number":
        named = "the Service in document 1"
    assert_refused(result, "check-service", Malformed(path, f"{named} is invalid: {message}"))
    assert cloud.calls == []
    with pytest.raises(ApiError) as refused:
        kube_api.request("POST", SERVICES.path(namespace), query={"dryRun": "All"}, body=service)
    assert refused.value.status in (400, 422)


def test_values_the_api_server_takes_are_taken(
    kube_api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    # YAML dates stay strings, a null annotation is "", generateName names the Service, an
    # unknown field is passed over: all stored by the API server as well.
    manifest = (
        "apiVersion: v1\nkind: Service\n"
        "metadata: {generateName: web-, annotations: {deployed: 2024-01-02, empty: null}}\n"
        "spec: {type: LoadBalancer, colour: blue, ports: [{port: 80, targetPort: http}]}\n"
    )
    path = tmp_path / "service.yaml"
    path.write_text(manifest)

    result = check_file(path)

    assert (result.status, result.stderr) == (0, "")
    # As kubectl sends it: the YAML made JSON, the date a string.
    body = yaml.load(manifest, Loader=yaml.BaseLoader)
    body["metadata"]["annotations"]["empty"] = None
    body["spec"]["ports"][0]["port"] = 80
    stored = kube_api.request("POST", SERVICES.path(namespace), query={"dryRun": "All"}, body=body)
    assert stored["metadata"]["annotations"] == {"deployed": "2024-01-02", "empty": ""}
