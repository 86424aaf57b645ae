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
    )
    assert config.endpoint == "http://127.0.0.1:9999/compute/v1/"


def test_without_api_endpoint_google_is_used() -> None:
    assert parse_cloud_config("[Global]\nproject-id = p\n").endpoint == DEFAULT_API_ENDPOINT


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[global]\nmultizone = maybe\n", 2, "true or false"),
        ("[global]\nproject-id = a\n\nproject-id = b\n", 4, "given twice (first on line 2)"),
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
    # upstream starts. Its ConfigGlobal also has stack-type, secondary-range-name,
    # container-api-endpoint and alpha-features, which polyccm does not implement.
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
        "/etc/gce.conf:4: key 'Alpha-Features' in [global] is ignored: polyccm does not "
        "implement it",
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
