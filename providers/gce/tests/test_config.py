"""gce.conf as upstream writes it: every key read, every mistake named with file and line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from polyccm.errors import ConfigError
from polyccm_gce.config import (
    DEFAULT_API_ENDPOINT,
    CloudConfig,
    load_cloud_config,
    parse_cloud_config,
)
from polyccm_testing.opstools import run_polyccm, unreadable_files

UPSTREAM = """\
; written by kube-up
[global]
project-id = my-project
network-project-id = shared-vpc
network-name = my-net
subnetwork-name = "nodes"
node-tags = cluster-node
node-tags = extra-tag
node-instance-prefix = gke-cluster
regional = true
multizone = yes
local-zone = europe-west1-b
token-url = nil
api-endpoint = http://127.0.0.1:9999/compute/v1/  # the emulator
stack-type = IPV6
"""


def test_every_upstream_key_is_read() -> None:
    config = parse_cloud_config(UPSTREAM)

    assert config == CloudConfig(
        project_id="my-project",
        network_project_id="shared-vpc",
        network_name="my-net",
        subnetwork_name="nodes",
        node_tags=("cluster-node", "extra-tag"),
        node_instance_prefix="gke-cluster",
        regional=True,
        multizone=True,
        local_zone="europe-west1-b",
        token_url="nil",
        api_endpoint="http://127.0.0.1:9999/compute/v1/",
        stack_type="IPV6",
    )
    assert config.endpoint == "http://127.0.0.1:9999/compute/v1/"


def test_without_api_endpoint_google_is_used() -> None:
    assert parse_cloud_config("[Global]\nproject-id = p\n").endpoint == DEFAULT_API_ENDPOINT


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[global]\nmultizone = maybe\n", 2, "true or false"),
        ("project-id = a\n", 1, "outside a section"),
        ("[global]\napi-endpoint = 127.0.0.1:1\n", 2, "http(s) URL"),
        ('[global]\nnetwork-name = "open\n', 2, "unterminated"),
        ("[global]\n= value\n", 2, "expected 'key = value'"),
        ("[global\n", 1, "malformed section header"),
    ],
)
def test_mistakes_name_the_file_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_cloud_config(text, "/etc/gce.conf")

    assert raised.value.path == "/etc/gce.conf"
    assert raised.value.line == line
    assert str(raised.value).startswith(f"/etc/gce.conf:{line}: ")
    assert words in str(raised.value)


def test_unknown_sections_and_keys_are_warned_about_and_ignored_never_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # cloud-provider-gcp providers/gce/gce.go (commit 0315e7b) readConfig reads gce.conf with
    # gcfg.FatalOnly(gcfg.ReadInto(cfg, reader)): gopkg.in/gcfg.v1 v1.2.3 errors.go:5-20 drops
    # the extraData that set.go:226-229 and :269-273 report for an unknown section or key, so
    # upstream starts. Its ConfigGlobal also has secondary-range-name and container-api-endpoint,
    # which polyccm does not implement, and alpha-features, of which polyccm implements
    # ILBSubsets alone (gce_alpha.go:22-30@v36.3.8).
    text = (
        "[global]\n"
        "project-id = p\n"
        "project = t0ken-looking-value\n"
        "Alpha-Features = NetLB_RBS\n"
        "[aws]\n"
        "project-id = other\n"
        "project-id = twice-is-no-error-in-an-ignored-section\n"
    )
    with caplog.at_level(logging.WARNING):
        config = parse_cloud_config(text, "/etc/gce.conf")

    assert config.project_id == "p"
    assert caplog.messages == [
        "/etc/gce.conf:5: unknown section [aws] is ignored, with its keys",
        "/etc/gce.conf:3: unknown key 'project' in [global] is ignored",
        "/etc/gce.conf:4: alpha feature in [global] is ignored: polyccm implements only ILBSubsets",
    ]
    assert "t0ken" not in caplog.text and "NetLB" not in caplog.text, "no value is logged"


def test_a_broken_file_is_its_error_alone_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="true or false"):
        parse_cloud_config("[aws]\n[global]\nproject = x\nregional = maybe\n", "/etc/gce.conf")

    assert caplog.messages == []


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_cloud_config(tmp_path / "missing.conf")


# -- bad input: one line, exit 2, or upstream's reading with a warning -----------------------


def test_a_cloud_config_that_is_not_utf8_or_too_large_is_one_line(tmp_path: Path) -> None:
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        with pytest.raises(ConfigError) as raised:
            load_cloud_config(case.path)

        assert str(raised.value) == f"{case.path}: {case.message}", name


def test_a_key_or_global_given_twice_is_read_as_gcfg_reads_it_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # cloud-provider-gcp providers/gce/gce.go (commit 0315e7b) readConfig reads gce.conf with
    # gcfg.FatalOnly(gcfg.ReadInto(cfg, reader)). gopkg.in/gcfg.v1 v1.2.3 read.go:127 and :173
    # call set() for every header and line; set.go:217-329 finds the same [global] struct
    # again and assigns a single-valued field again (set.go:292, :308-317): the last value
    # wins, without a word. node-tags, a []string, appends (set.go:277, :325-327).
    text = (
        "[global]\n"
        "project-id = first-project\n"
        "node-tags = a\n"
        "[Global]\n"
        "Project-ID = second-project\n"
        "node-tags = b\n"
        "regional = false\n"
        "regional\n"
    )
    with caplog.at_level(logging.WARNING):
        config = parse_cloud_config(text, "/etc/gce.conf")

    assert (config.project_id, config.node_tags, config.regional) == (
        "second-project", ("a", "b"), True
    )  # fmt: skip
    assert caplog.messages == [
        "/etc/gce.conf:4: section [Global] is given again (first on line 1): its keys are read "
        "as those of one section, as upstream's gcfg reads them",
        "/etc/gce.conf:5: key 'Project-ID' in [global] is given again (first on line 2): the "
        "last value is used, as upstream's gcfg uses it",
        "/etc/gce.conf:8: key 'regional' in [global] is given again (first on line 7): the "
        "last value is used, as upstream's gcfg uses it",
    ]
    assert "second-project" not in caplog.text, "a value is never logged"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # The Compute API's discovery document (compute.v1.json, revision 20261106, as
        # google-api-python-client 2.202.0 ships it) gives every call's path parameters a
        # pattern: "zone" [a-z](?:[-a-z0-9]{0,61}[a-z0-9])?, "project" lower-case labels,
        # optionally "domain:"-prefixed. And cloud-provider-gcp providers/gce/gce_util.go
        # (commit 01ec195) GetGCERegion refuses a zone without "-" ("unexpected zone").
        ("local-zone = not/a zone", "local-zone 'not/a zone' is no zone"),
        ("local-zone = uscentral1b", "local-zone 'uscentral1b' is no zone"),
        ("local-zone = US-CENTRAL1-B", "local-zone 'US-CENTRAL1-B' is no zone"),
        ("project-id = my\tproject", "project-id 'my\\tproject' is no project id"),
        ("project-id = my\x01project", "project-id 'my\\x01project' is no project id"),
        ("project-id = My_Project", "project-id 'My_Project' is no project id"),
        ("network-project-id = a b", "network-project-id 'a b' is no project id"),
        (f"project-id = {'p' * 5_000_000}", f"project-id {'p' * 60!r}… (5000000 bytes) is no"),
        ("api-endpoint = http://[::1/compute/v1/", "'http://[::1/compute/v1/' is no URL"),
    ],
    ids=[
        "zone-slash",
        "zone-no-hyphen",
        "zone-upper",
        "project-tab",
        "project-control",
        "project-upper",
        "network-project-space",
        "project-5MB",
        "endpoint-ipv6",
    ],
)
def test_names_the_compute_api_refuses_are_one_line(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_cloud_config(f"[global]\nnetwork-name = n\n{line}\n", "/etc/gce.conf")

    assert str(raised.value).startswith("/etc/gce.conf:3: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400


def test_names_the_compute_api_takes_are_taken() -> None:
    config = parse_cloud_config(
        "[global]\nproject-id = example.com:my-project\nnetwork-project-id = 123456789012\n"
        "local-zone = europe-west1-b\n"
    )

    assert config.project_id == "example.com:my-project" and config.local_zone == "europe-west1-b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"[global]\n\xff", "cloud config is not UTF-8 text (byte 0xff at offset 9)"),
        (b"[global]\nlocal-zone = not/a zone\n", "local-zone 'not/a zone' is no zone"),
        (b"[global]\nproject-id = my\x01project\n", "'my\\x01project' is no project id"),
        (b"[global]\nproject-id = " + b"p" * 900_000, "… (900000 bytes) is no project id"),
    ],
    ids=["not-utf8", "zone", "project-control", "project-900KB"],
)
def test_polyccm_refuses_a_bad_gce_conf_in_one_line_and_exit_2(
    tmp_path: Path, text: bytes, message: str
) -> None:
    config = tmp_path / "gce.conf"
    config.write_bytes(text)

    result = run_polyccm(["--provider=gce", f"--cloud-config={config}"])

    lines = result.stderr.splitlines()
    assert (result.status, result.stdout, len(lines)) == (2, "", 1), result.stderr[-2000:]
    assert lines[0].startswith(f"polyccm: error: {config}") and message in lines[0]
    assert len(lines[0]) < 500


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GCE_METADATA_HOST", "[::1"),
        ("GCE_METADATA_HOST", "host:port"),
        ("GCE_METADATA_ROOT", "a b"),
    ],
)
def test_a_metadata_host_that_is_no_host_is_one_line(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    from polyccm_gce.provider import metadata

    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigError) as raised:  # a ValueError from urllib before
        metadata("project/project-id")

    assert str(raised.value) == f"{variable} {value!r} is no host[:port]"


def test_alpha_features_are_a_list_as_gcfg_reads_them() -> None:
    # gce.go:452@v36.3.8 NewAlphaFeatureGate(configFile.Global.AlphaFeatures), a []string:
    # one feature a line. Before: the key was ignored (ILBSubsets too).
    config = parse_cloud_config(
        "[global]\nalpha-features = ILBSubsets\nalpha-features = SkipIGsManagement\n"
    )

    assert config.alpha_features == ("ILBSubsets", "SkipIGsManagement")
