"""The settings an operator gives: upstream's variables and JSON keys, one-line errors, the key
kept out of every log line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from polyccm import logredact, plugins
from polyccm.errors import ConfigError
from polyccm_packet.config import DEFAULT_API_URL, read_config
from polyccm_packet.plugin import polyccm_build_provider
from polyccm_packet.provider import MetalProvider, config_from
from polyccm_testing.opstools import run_polyccm

BASE = {"METAL_API_KEY": "secret-metal-key-1234", "METAL_PROJECT_ID": "p-1"}


def test_the_environment_names_everything() -> None:
    config = read_config({
        **BASE, "METAL_METRO": "da", "METAL_LOAD_BALANCER": "metallb:///metallb-system/config",
        "METAL_LOCAL_ASN": "65100", "METAL_BGP_PASS": "Md5Pass1234",
        "METAL_API_URL": "http://127.0.0.1:9/metal/v1/",
    })  # fmt: skip
    assert (config.api_key, config.project_id, config.metro) == (BASE["METAL_API_KEY"], "p-1", "da")
    assert config.local_asn == 65100 and config.bgp_pass == "Md5Pass1234"
    assert config.metallb_target == ("metallb-system", "config")
    assert config.api_url == "http://127.0.0.1:9/metal/v1"


def test_packet_auth_token_and_the_facility_are_accepted() -> None:
    config = read_config(
        {"PACKET_AUTH_TOKEN": "k", "METAL_PROJECT_ID": "p", "METAL_FACILITY": "da11"}
    )
    assert (config.api_key, config.facility, config.metro) == ("k", "da11", "")
    assert config.api_url == DEFAULT_API_URL and config.local_asn == 65000


def test_the_json_cloud_config_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    path = tmp_path / "cloud.json"
    path.write_text(json.dumps({"apiKey": "file-key", "projectID": "file-project", "metro": "ny",
                                "localASN": 65200, "loadbalancer": "kube-vip://",
                                "base-url": "http://127.0.0.1:1/metal/v1"}))  # fmt: skip
    config = config_from({"METAL_METRO": "da"}, path)
    assert (config.api_key, config.project_id, config.metro) == ("file-key", "file-project", "da")
    assert config.local_asn == 65200 and config.load_balancer == "kube-vip://"
    assert config.api_url == "http://127.0.0.1:1/metal/v1"


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"METAL_PROJECT_ID": "p"}, "METAL_API_KEY"),
        ({"METAL_API_KEY": "k"}, "METAL_PROJECT_ID"),
        ({**BASE, "METAL_LOCAL_ASN": "sixty"}, "METAL_LOCAL_ASN"),
        ({**BASE, "METAL_LOAD_BALANCER": "haproxy://"}, "METAL_LOAD_BALANCER"),
        ({**BASE, "METAL_API_URL": "ftp://x"}, "METAL_API_URL"),
        ({**BASE, "METAL_BGP_PASS": "short-pass"}, "METAL_BGP_PASS"),
    ],
)
def test_a_mistake_is_one_line_naming_the_key(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_config(environ)
    assert named in str(raised.value) and "\n" not in str(raised.value)


def test_a_cloud_config_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cloud.json"
    path.write_text("{apiKey: nope")
    with pytest.raises(ConfigError, match=str(path)):
        config_from({}, path)


def test_the_api_key_and_bgp_password_are_masked_in_every_log_line() -> None:
    logredact.forget_secrets()
    config = read_config({**BASE, "METAL_BGP_PASS": "BgpMd5Password9"})

    assert BASE["METAL_API_KEY"] not in repr(config) and "BgpMd5" not in repr(config)
    for secret in (BASE["METAL_API_KEY"], "BgpMd5Password9"):
        for line in (f"key {secret}", f"X-Auth-Token: {secret}", f"url?k={secret}&x=1"):
            assert secret not in logredact.redact(line), line


def test_a_key_polyccm_does_not_read_is_warned_about_and_the_provider_still_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # cloud-provider-equinix-metal metal/config.go (getMetalConfig) reads the file with
    # json.Unmarshal into its Config, which drops any other key without a word; eipTag and
    # bgpNodeSelector are keys of that Config that polyccm does not implement.
    path = tmp_path / "cloud.json"
    path.write_text(json.dumps({
        "apiKey": "file-key-5678", "projectID": "p-1", "metro": "da",
        "metroo": "typo-value", "eipTag": "cluster-api-provider-packet:cluster-id:x",
        "bgpNodeSelector": "kubernetes.io/role=node",
    }))  # fmt: skip
    monkeypatch.delenv("METAL_API_KEY", raising=False)

    with caplog.at_level(logging.WARNING):
        built = polyccm_build_provider(plugins.ProviderSettings("packet", path, "kubernetes"))

    assert isinstance(built, MetalProvider) and built.config.metro == "da"
    assert caplog.messages == [
        f"{path}: unknown key 'metroo' is ignored",
        f"{path}: key 'eipTag' is ignored: polyccm does not implement it",
        f"{path}: key 'bgpNodeSelector' is ignored: polyccm does not implement it",
    ]
    assert "typo-value" not in caplog.text and "cluster-id" not in caplog.text


def test_a_cloud_config_that_is_not_json_ends_the_start_with_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cloud.json"
    path.write_text('{"apiKey": "k",\n "projectID": p}\n')

    result = run_polyccm(["--provider=packet", f"--cloud-config={path}"])

    assert result.status == 2
    assert result.stderr == f"polyccm: error: {path}:2: not JSON: Expecting value\n"
