"""The settings an operator gives: upstream's variables and JSON keys, one-line errors, the key
kept out of every log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

import pytest
from polyccm import logredact, plugins
from polyccm.errors import ConfigError
from polyccm_packet.config import DEFAULT_API_URL, load_config_keys, read_config
from polyccm_packet.plugin import polyccm_build_provider
from polyccm_packet.provider import MetalProvider, config_from
from polyccm_testing.opstools import run_polyccm, unreadable_files

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
    # bgpNodeSelector are keys of that Config (config.go:55,57@38d15e2), read as it reads them.
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
    assert caplog.messages == [f"{path}: unknown key 'metroo' is ignored"]
    assert built.config.eip_tag == "cluster-api-provider-packet:cluster-id:x"
    assert built.config.bgp_node_selector.text == "kubernetes.io/role=node"
    assert "typo-value" not in caplog.text and "cluster-id" not in caplog.text


def test_a_cloud_config_that_is_not_json_ends_the_start_with_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cloud.json"
    path.write_text('{"apiKey": "k",\n "projectID": p}\n')

    result = run_polyccm(["--provider=packet", f"--cloud-config={path}"])

    assert result.status == 2
    assert result.stderr == f"polyccm: error: {path}:2: not JSON: Expecting value\n"


# -- bad input: one line, exit 2, or upstream's reading with a warning -----------------------


def test_a_cloud_config_that_cannot_be_read_or_nests_too_deep_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"apiKey": ' + "[" * 100_000 + "]" * 100_000 + "}")
    cases = {
        name: (case.path, case.message)
        for name, case in unreadable_files(tmp_path, "cloud config").items()
    }
    cases["deep"] = (deep, "nested deeper than 100 levels")  # a RecursionError before
    for name, (path, message) in cases.items():
        with pytest.raises(ConfigError) as raised:
            config_from(BASE, path)

        assert str(raised.value) == f"{path}: {message}", name


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        # cloud-provider-equinix-metal metal/config.go: Config gives apiKey, projectId, metro,
        # facility, loadbalancer, bgpPass and base-url Go type string, localASN int, and
        # getMetalConfig stops at json.Unmarshal's error ("cannot unmarshal number into Go
        # struct field Config.apiKey of type string").
        ({"apiKey": 12345, "projectID": "p"}, "'apiKey' must be a string, not a number"),
        ({"apiKey": "k", "projectID": ["p-1"]}, "'projectID' must be a string, not a list"),
        (
            {"apiKey": "k", "projectId": "p", "metro": {"code": "da"}},
            "'metro' must be a string, not an object",
        ),
        (
            {"apiKey": "k", "projectId": "p", "localASN": "65000"},
            "'localASN' must be an integer, not a string",
        ),
        (
            {"apiKey": "k", "projectId": "p", "localASN": 65000.5},
            "'localASN' must be an integer, not a number",
        ),
        ({"apiKey": True, "projectId": "p"}, "'apiKey' must be a string, not true"),
        # encoding/json matches a key to a field ignoring case and keeps the last of two
        # spellings. polyccm's one JSON reader (polyccm.inputs.load_json) refuses a key given
        # twice, in every file it reads: two spellings of one key are refused alike.
        (
            {"apiKey": "k", "projectID": "p", "projectId": "q"},
            "'projectID' and 'projectId' are one key given twice (upstream matches keys ignoring "
            "case)",
        ),
    ],
    ids=[
        "key-number",
        "project-list",
        "metro-object",
        "asn-string",
        "asn-float",
        "key-bool",
        "two-spellings",
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_never_echoing_it(
    tmp_path: Path, keys: dict[str, object], message: str
) -> None:
    path = tmp_path / "cloud.json"
    path.write_text(json.dumps(keys))

    with pytest.raises(ConfigError) as raised:
        load_config_keys(path)

    assert str(raised.value) == f"{path}: {message}"


def test_a_key_written_twice_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cloud.json"
    path.write_text('{"apiKey": "k", "projectID": "p", "apiKey": "other"}')

    with pytest.raises(ConfigError) as raised:
        load_config_keys(path)

    assert str(raised.value) == f"{path}: duplicate key 'apiKey'"


def test_keys_are_matched_ignoring_case_as_upstream_matches_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # encoding/json (Unmarshal: "preferring an exact match but also accepting a
    # case-insensitive match") reads APIKEY into Config.AuthToken (json:"apiKey").
    path = tmp_path / "cloud.json"
    path.write_text(json.dumps({"APIKEY": "file-key", "ProjectId": "p-1", "LocalAsn": 65100,
                                "EIPTAG": "x", "Metroo": "typo"}))  # fmt: skip

    with caplog.at_level(logging.WARNING):
        config = config_from({}, path)

    assert (config.api_key, config.project_id, config.local_asn) == ("file-key", "p-1", 65100)
    assert config.eip_tag == "x"
    assert caplog.messages == [f"{path}: unknown key 'Metroo' is ignored"]


# One rule for plain http, DigitalOcean's too (polyccm.urls.secret_url): the API key goes to
# METAL_API_URL (or base-url), so it must be https, except to a loopback host, for an emulator
# on this machine. (Upstream takes base-url unchecked: http to any host.)
@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/metal/v1", "http://localhost:9/metal/v1", "http://[::1]:9/metal/v1"]
)
def test_plain_http_reaches_only_a_loopback_emulator(url: str) -> None:
    assert read_config({**BASE, "METAL_API_URL": url}).api_url == url


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"METAL_API_URL": "https://[::1"},
            "METAL_API_URL (base-url) 'https://[::1' is no URL: Invalid IPv6 URL",
        ),
        (
            {"METAL_API_URL": "http://api.equinix.com/metal/v1"},
            "'http://api.equinix.com/metal/v1' must be https",
        ),
        ({"METAL_API_URL": "http://192.0.2.1:80/metal/v1"}, "must be https"),
        ({"METAL_API_URL": "https://api.test:http/"}, "is no URL: Port could not be cast"),
        ({"METAL_METADATA_URL": "http://[::1"}, "METAL_METADATA_URL 'http://[::1' is no URL"),
        (
            {"METAL_LOCAL_ASN": "6" * 5_000_000},
            f"METAL_LOCAL_ASN must be an AS number: {'6' * 60!r}… (5000000 bytes)",
        ),
    ],
    ids=["ipv6", "http-equinix", "http-address", "port", "metadata-ipv6", "asn-5MB"],
)
def test_a_bad_url_or_number_is_one_line(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_config({**BASE, **environ})

    assert message in str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400


# cloud-provider-equinix-metal metal/loadbalancers.go (newLoadBalancers) reads the setting with
# url.Parse, and metal/loadbalancers/metallb/metallb.go (NewLB) takes the path without one
# leading and one trailing slash, cuts it at its first slash, and defaults an empty namespace
# to metallb-system and an empty name to config; the README documents metallb:/// as "the
# default configmap". The host and the query (crdConfiguration) play no part in the names.
@pytest.mark.parametrize(
    ("setting", "target", "warning"),
    [
        ("metallb:///", ("metallb-system", "config"), ""),
        ("metallb://", ("metallb-system", "config"), ""),
        ("metallb:///lb", ("lb", "config"), ""),
        ("metallb:///lb/my.config/", ("lb", "my.config"), ""),
        (
            "metallb://metallb-system/config",
            ("config", "config"),
            "METAL_LOAD_BALANCER 'metallb://metallb-system/config': the host 'metallb-system' is "
            "ignored, as upstream ignores it, and the ConfigMap is config/config; write "
            "metallb:///<namespace>/<name>, with three slashes",
        ),
        ("metallb:///lb/c?crdConfiguration=true", ("lb", "c"), ""),
        (
            "metallb:///lb/c?other=1",
            ("lb", "c"),
            "METAL_LOAD_BALANCER 'metallb:///lb/c?other=1': 'other' ignored, as upstream ignores "
            "it (only crdConfiguration is read)",
        ),
    ],
)
def test_metallb_names_its_configmap_as_upstream_reads_it(
    setting: str, target: tuple[str, str], warning: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        config = read_config({**BASE, "METAL_LOAD_BALANCER": setting})

    assert config.metallb_target == target
    assert caplog.messages == ([warning] if warning else [])


@pytest.mark.parametrize(
    ("setting", "crds"),
    [("metallb:///", False), ("metallb:///lb/c?crdConfiguration=true", True),
     ("metallb:///?crdConfiguration=1", True), ("metallb:///?crdConfiguration=False", False)],
)  # fmt: skip
def test_metallbs_objects_are_chosen_by_upstreams_flag(setting: str, crds: bool) -> None:
    # metal/loadbalancers/metallb/metallb.go:64,92-99@38d15e2: strconv.ParseBool of
    # crdConfiguration, false when absent (polyccm chose by what the API served)
    assert read_config({**BASE, "METAL_LOAD_BALANCER": setting}).metallb_crds is crds


def test_a_crd_configuration_that_is_no_boolean_is_one_line() -> None:
    with pytest.raises(ConfigError, match="crdConfiguration must be true or false, not 'yes'"):
        read_config({**BASE, "METAL_LOAD_BALANCER": "metallb:///?crdConfiguration=yes"})


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("metallb://[x", "METAL_LOAD_BALANCER 'metallb://[x' is no URL: Invalid IPv6 URL"),
        ("metallb:///Metal_LB/config", "'Metal_LB' is no namespace name"),
        ("metallb:///lb/a/b", "'a/b' is no ConfigMap name"),
        ("metallb:///lb/" + "c" * 254, "is no ConfigMap name"),
        ("metallb:///-lb", "'-lb' is no namespace name"),
    ],
)
def test_a_metallb_configmap_kubernetes_cannot_name_is_one_line(setting: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_config({**BASE, "METAL_LOAD_BALANCER": setting})

    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("file_text", "environ", "message"),
    [
        ('{"apiKey": ' + "[" * 100_000 + "]" * 100_000 + "}", {}, "nested deeper than 100 levels"),
        ('{"apiKey": 12345, "projectID": "p"}', {}, "'apiKey' must be a string, not a number"),
        ('{"apiKey": "k", "projectID": ["p"]}', {}, "'projectID' must be a string, not a list"),
        ('{"apiKey": "k", "projectID": "p", "apiKey": "k"}', {}, "duplicate key 'apiKey'"),
        ('{"apiKey": "k", "projectID": "p"}', {"METAL_API_URL": "https://[::1"}, "is no URL"),
        (
            '{"apiKey": "k", "projectID": "p", "base-url": "http://192.0.2.1/metal/v1"}',
            {},
            "must be https",
        ),
        ('{"apiKey": "k", "projectID": "p", "loadbalancer": "metallb://[x"}', {}, "is no URL"),
    ],
    ids=["deep", "key-number", "project-list", "key-twice", "url-ipv6", "url-http", "lb-ipv6"],
)
def test_polyccm_refuses_a_bad_config_in_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_text: str, environ: dict[str, str],
    message: str,
) -> None:  # fmt: skip
    path = tmp_path / "cloud.json"
    path.write_text(file_text)
    for name in ("METAL_API_KEY", "PACKET_AUTH_TOKEN", "METAL_PROJECT_ID", "METAL_API_URL",
                 "METAL_LOAD_BALANCER", "METAL_METADATA_URL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    result = run_polyccm(["--provider=packet", f"--cloud-config={path}"])

    lines = result.stderr.splitlines()
    assert (result.status, result.stdout, len(lines)) == (2, "", 1), result.stderr[-2000:]
    assert lines[0].startswith("polyccm: error: ") and message in lines[0]
    assert "Traceback" not in result.stderr and len(lines[0]) < 500


# -- every setting upstream reads (metal/config.go@38d15e2) -----------------------------------


def test_the_control_plane_and_bgp_settings_are_read_and_the_environment_wins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # config.go:55-58 (the JSON keys), 169 (eipTag), 173-186 (apiServerPort, Atoi), 188-192
    # (bgpNodeSelector, labels.Parse), 194-201 (eipHealthCheckUseHostIP, ParseBool) @38d15e2:
    # each from the file, each overridden by its METAL_* variable. cluster-api's Packet template
    # passes eipTag and apiServerPort; before, polyccm warned "ignored" and managed nothing.
    path = tmp_path / "cloud-sa.json"
    path.write_text(json.dumps({
        "apiKey": "k", "projectID": "p-1", "eipTag": "cluster-api-provider-packet:cluster-id:c1",
        "apiServerPort": 6443, "bgpNodeSelector": "node-role.kubernetes.io/worker",
        "eipHealthCheckUseHostIP": True,
    }))  # fmt: skip

    with caplog.at_level(logging.WARNING):
        keys = load_config_keys(path)
    from_file = read_config({}, keys)
    overridden = read_config({
        "METAL_EIP_TAG": "env-tag", "METAL_API_SERVER_PORT": "7443",
        "METAL_BGP_NODE_SELECTOR": "bgp in (yes),!edge",
        "METAL_EIP_HEALTH_CHECK_USE_HOST_IP": "F",
    }, keys)  # fmt: skip

    assert caplog.messages == []
    assert from_file.eip_tag == "cluster-api-provider-packet:cluster-id:c1"
    assert from_file.api_server_port == 6443 and from_file.eip_health_check_use_host_ip
    worker = {"node-role.kubernetes.io/worker": ""}
    assert from_file.bgp_node_selector.matches(worker)
    assert not from_file.bgp_node_selector.matches({})
    assert (overridden.eip_tag, overridden.api_server_port) == ("env-tag", 7443)
    assert overridden.eip_health_check_use_host_ip is False
    assert overridden.bgp_node_selector.matches({"bgp": "yes"})
    assert not overridden.bgp_node_selector.matches({"bgp": "yes", "edge": ""})
    assert not overridden.bgp_node_selector.matches(worker)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        # loadbalancers.go:99-104@38d15e2 made an emlb implementor; the product is gone
        (
            {"METAL_LOAD_BALANCER": "emlb:///da"},
            "METAL_LOAD_BALANCER 'emlb:///da': Equinix Metal Load Balancers (emlb) ended with "
            "Equinix Metal on 2026-06-30",
        ),
        # config.go:171 and cloud.go:87 (controlPlaneLoadBalancerManager, an EMLB) @38d15e2
        ({"METAL_LOAD_BALANCER_ID": "lb-1"}, "METAL_LOAD_BALANCER_ID (loadBalancerID) is set"),
        # config.go:190-192@38d15e2: labels.Parse refuses it, and so the start
        (
            {"METAL_BGP_NODE_SELECTOR": "role in worker"},
            "METAL_BGP_NODE_SELECTOR must be a Kubernetes label selector: '(' expected",
        ),
        # config.go:176-179@38d15e2 (Atoi)
        ({"METAL_API_SERVER_PORT": "https"}, "METAL_API_SERVER_PORT must be a port number"),
        # config.go:195-199@38d15e2 (ParseBool)
        (
            {"METAL_EIP_HEALTH_CHECK_USE_HOST_IP": "yes"},
            "METAL_EIP_HEALTH_CHECK_USE_HOST_IP must be true or false: 'yes'",
        ),
    ],
    ids=["emlb", "load-balancer-id", "selector", "port", "use-host-ip"],
)
def test_emlb_and_bad_settings_stop_the_start_in_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], message: str
) -> None:
    for name in ("METAL_API_URL", "METAL_LOAD_BALANCER", "METAL_METADATA_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**BASE, **environ}.items():
        monkeypatch.setenv(name, value)

    result = run_polyccm(["--provider=packet"])

    lines = result.stderr.splitlines()
    assert (result.status, result.stdout, len(lines)) == (2, "", 1), result.stderr[-2000:]
    assert lines[0].startswith("polyccm: error: ") and message in lines[0], lines[0]


def test_a_file_whose_use_host_ip_is_no_boolean_is_one_line(tmp_path: Path) -> None:
    # config.go:58@38d15e2: a bool field; json.Unmarshal refuses a string for it
    path = tmp_path / "cloud.json"
    path.write_text('{"apiKey": "k", "projectID": "p", "eipHealthCheckUseHostIP": "true"}')

    with pytest.raises(ConfigError, match="'eipHealthCheckUseHostIP' must be true or false"):
        load_config_keys(path)


def test_the_annotation_names_are_read_from_the_environment_then_the_file(tmp_path: Path) -> None:
    # metal/config.go:153-163@38d15e2: METAL_ANNOTATION_* over annotation* keys over defaults
    path = tmp_path / "cloud-sa.json"
    path.write_text(json.dumps({"apiKey": "k-1", "projectID": "p-1",
                                "annotationPeerIP": "a.io/{{n}}-peer",
                                "annotationNetworkIPv4Private": "a.io/net"}))  # fmt: skip

    names = config_from({"METAL_ANNOTATION_PEER_IP": "b.io/{{n}}-ip"}, path).annotation_names

    assert (names.peer("peer-ip", 1), names.network) == ("b.io/1-ip", "a.io/net")
    assert names.peer("node-asn", 0) == "metal.equinix.com/bgp-peers-0-node-asn"


@pytest.mark.parametrize("value", ["1", ""])
def test_packngo_debug_logs_each_metal_exchange_with_the_key_and_bgp_password_masked(
    metal: Mapping[str, str], caplog: pytest.LogCaptureFixture, value: str
) -> None:
    # Upstream turns the SDK's wire dump on when PACKNGO_DEBUG is set at all, whatever its
    # value: metal/cloud.go:65 and :158-161 (checkDebugEnabled, os.LookupEnv) @38d15e2.
    from polyccm_packet_emulator.testing import MetalApi, provider_for

    MetalApi(metal).enable_bgp(md5="ProjMd5Secret7")
    provider = provider_for(metal, PACKNGO_DEBUG=value)
    caplog.set_level(logging.INFO, logger="polyccm_packet.api")
    provider.api.call("bgp.find_bgp_config_by_project", metal["METAL_PROJECT_ID"])

    lines = [logredact.redact(r.getMessage()) for r in caplog.records if r.name.endswith(".api")]
    assert any("find_bgp_config_by_project" in line and "HTTP 200" in line for line in lines)
    # What the handlers print (their RedactingFilter applies redact) keeps both secrets out.
    assert all(metal["METAL_API_KEY"] not in line for line in lines)
    assert all("ProjMd5Secret7" not in line for line in lines), lines


def test_without_packngo_debug_no_exchange_is_logged(
    metal: Mapping[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    from polyccm_packet_emulator.testing import provider_for

    provider = provider_for(metal)
    caplog.set_level(logging.INFO, logger="polyccm_packet.api")
    provider.api.call("bgp.find_bgp_config_by_project", metal["METAL_PROJECT_ID"])
    assert not [r for r in caplog.records if r.name == "polyccm_packet.api"]
