"""The environment, read as upstream reads it: one line naming the variable at fault."""

from __future__ import annotations

from pathlib import Path

import pytest
from polyccm.errors import ConfigError
from polyccm_digitalocean.config import DEFAULT_API_URL, read_environment
from polyccm_testing.opstools import run_polyccm

TOKEN = "dop_v1_" + "a" * 64


def test_every_variable_is_read() -> None:
    config = read_environment({"DO_ACCESS_TOKEN": TOKEN, "DO_OVERRIDE_URL": "https://x.test/",
                               "DO_CLUSTER_ID": "c1", "DO_CLUSTER_VPC_ID": "v1",
                               "REGION": "fra1", "DO_API_RATE_LIMIT_QPS": "2",
                               "DEFAULT_LB_TYPE": "REGIONAL"})  # fmt: skip

    assert (config.token, config.api_url, config.cluster_id, config.vpc_id, config.region,
            config.qps, config.default_lb_type) == (TOKEN, "https://x.test", "c1", "v1", "fra1",
                                                    2.0, "REGIONAL")  # fmt: skip
    assert read_environment({"DO_ACCESS_TOKEN": TOKEN}).default_lb_type == "REGIONAL_NETWORK"


def test_metrics_and_debug_addresses_are_read_as_upstream_splits_them() -> None:
    # cloud.go:143-160@v0.1.68: METRICS_ADDR through net.SplitHostPort (an empty host is every
    # address, an IPv6 host in brackets); DEBUG_ADDR is the debug server's listen address.
    environ = {"DO_ACCESS_TOKEN": TOKEN, "METRICS_ADDR": "[::1]:9090", "DEBUG_ADDR": ":8081"}
    config = read_environment(environ)

    assert (config.metrics_addr, config.debug_addr) == (("::1", 9090), ("", 8081))
    unset = read_environment({"DO_ACCESS_TOKEN": TOKEN})
    assert (unset.metrics_addr, unset.debug_addr) == (None, None)


def test_the_token_may_come_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")

    config = read_environment({"DO_ACCESS_TOKEN_FILE": str(tmp_path / "token")})

    assert config.token == TOKEN and config.api_url == DEFAULT_API_URL


def test_the_public_access_firewall_is_read_as_upstream_reads_it() -> None:
    # cloud.go:132-141@v0.1.68: both variables or neither; the tags split on commas.
    environ = {"DO_ACCESS_TOKEN": TOKEN, "PUBLIC_ACCESS_FIREWALL_NAME": "k8s-public-access",
               "PUBLIC_ACCESS_FIREWALL_TAGS": "k8s:c1:worker,k8s-worker"}  # fmt: skip
    config = read_environment(environ)

    assert (config.firewall_name, config.firewall_tags) == (
        "k8s-public-access", ("k8s:c1:worker", "k8s-worker"))  # fmt: skip
    assert read_environment({"DO_ACCESS_TOKEN": TOKEN}).firewall_name == ""


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({}, "DO_ACCESS_TOKEN"),
        ({"DO_ACCESS_TOKEN_FILE": "/nonexistent/token"}, "DO_ACCESS_TOKEN_FILE"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DO_OVERRIDE_URL": "http://192.0.2.1:1"}, "DO_OVERRIDE_URL"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DO_API_RATE_LIMIT_QPS": "-1"}, "DO_API_RATE_LIMIT_QPS"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DO_API_RATE_LIMIT_QPS": "fast"}, "DO_API_RATE_LIMIT_QPS"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DEFAULT_LB_TYPE": "GLOBAL"}, "DEFAULT_LB_TYPE"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DEFAULT_LB_TYPE": "regional"}, "DEFAULT_LB_TYPE"),
        # Upstream refuses a METRICS_ADDR net.SplitHostPort cannot split
        # (cloud.go:153-160@v0.1.68); DEBUG_ADDR would fail only at listen (cloud.go:147-150).
        ({"DO_ACCESS_TOKEN": TOKEN, "METRICS_ADDR": "9090"}, "METRICS_ADDR must be <host>:<port>"),
        ({"DO_ACCESS_TOKEN": TOKEN, "METRICS_ADDR": "::1:9090"}, "METRICS_ADDR must be"),
        ({"DO_ACCESS_TOKEN": TOKEN, "METRICS_ADDR": "host:99999"}, "METRICS_ADDR must be"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DEBUG_ADDR": "localhost"}, "DEBUG_ADDR must be <host>:<port>"),
        (
            {"DO_ACCESS_TOKEN": TOKEN, "PUBLIC_ACCESS_FIREWALL_NAME": "fw"},
            "PUBLIC_ACCESS_FIREWALL_TAGS is required",
        ),
        (
            {"DO_ACCESS_TOKEN": TOKEN, "PUBLIC_ACCESS_FIREWALL_TAGS": "t"},
            "PUBLIC_ACCESS_FIREWALL_NAME is required",
        ),
    ],
)
def test_a_bad_environment_is_one_line_naming_the_variable(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        read_environment(environ)


def test_the_region_comes_from_the_metadata_service_and_is_checked(do: dict[str, str]) -> None:
    from polyccm_digitalocean.provider import DigitalOceanProvider

    provider = DigitalOceanProvider.from_environment(dict(do))
    with pytest.raises(ConfigError, match="REGION 'mars1'"):
        DigitalOceanProvider.from_environment({**do, "REGION": "mars1"})

    assert provider.region == "nyc3"


def test_a_throttled_region_check_at_start_waits_and_then_starts(do: dict[str, str]) -> None:
    # Found by the fault suite: a 429 on regions.list while the provider was built killed the
    # process with a traceback. Now the check waits as the API asks and goes on.
    from polyccm_digitalocean.api import DigitalOceanApi
    from polyccm_digitalocean.provider import check_region
    from polyccm_digitalocean_emulator.testing import control

    api = DigitalOceanApi(read_environment(dict(do)))
    control(do).inject("regions_list", status=429, count=2)
    waited: list[float] = []
    check_region(api, "nyc3", sleep=waited.append)
    assert len(waited) == 2 and all(0 < w <= 4 for w in waited), waited

    control(do).inject("regions_list", status=429, count=10)
    with pytest.raises(ConfigError, match=r"regions: still rate limited after 3 s") as refused:
        check_region(api, "nyc3", waits=(1.0, 2.0), sleep=waited.append)
    assert "\n" not in str(refused.value)


# -- bad input: one line, exit 2 --------------------------------------------------------------


def _token_files(directory: Path) -> dict[str, tuple[Path, str]]:
    """Token files no reader should take, each with the end of the line refusing it."""
    binary = directory / "binary"
    binary.write_bytes(b"dop_v1_\xff\xfe")
    huge = directory / "huge"
    huge.write_text("dop_v1_" + "a" * (64 << 10))
    lines = directory / "two-lines"
    lines.write_text(f"{TOKEN}\n# the token of the staging team\n")
    folder = directory / "folder"
    folder.mkdir()
    what = "token file (DO_ACCESS_TOKEN_FILE)"
    return {
        "not-utf8": (binary, f"{what} is not UTF-8 text (byte 0xff at offset 7)"),
        "huge": (huge, f"{what} is larger than 64 KiB, the most polyccm reads"),
        "two-lines": (
            lines,
            f"{what} holds more than a token: it has spaces, line breaks or control characters "
            "inside",
        ),
        "directory": (folder, f"cannot read {what}: Is a directory"),
    }


def test_a_token_file_that_is_no_token_is_one_line_never_echoing_it(tmp_path: Path) -> None:
    for name, (path, message) in _token_files(tmp_path).items():
        with pytest.raises(ConfigError) as raised:
            read_environment({"DO_ACCESS_TOKEN_FILE": str(path)})

        assert str(raised.value) == f"{path}: {message}", name
        assert TOKEN not in str(raised.value)


# One rule for plain http, the Metal provider's too (polyccm.urls.secret_url): the token goes
# to DO_OVERRIDE_URL, so it must be https, except to a loopback host, for an emulator on this
# machine. (Upstream's CCM hands DO_OVERRIDE_URL to godo unchecked: http to any host.)
@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080", "http://127.9.9.9/", "http://localhost:1", "http://[::1]:1/"],
)
def test_plain_http_reaches_only_a_loopback_emulator(url: str) -> None:
    assert read_environment({"DO_ACCESS_TOKEN": TOKEN, "DO_OVERRIDE_URL": url}).api_url == (
        url.rstrip("/")
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DO_OVERRIDE_URL", "https://[::1", "DO_OVERRIDE_URL 'https://[::1' is no URL"),
        ("DO_OVERRIDE_URL", "https://api.test:99999", "is no URL: Port out of range 0-65535"),
        ("DO_OVERRIDE_URL", "http://192.0.2.1", "'http://192.0.2.1' must be https"),
        ("DO_OVERRIDE_URL", "http://localhost.example.com", "must be https"),
        ("DO_OVERRIDE_URL", "https://api.test/a b", "holds spaces or control characters"),
        ("DO_OVERRIDE_URL", "https:///v2", "DO_OVERRIDE_URL 'https:///v2' names no host"),
        ("DO_OVERRIDE_URL", "http://u:" + TOKEN + "@192.0.2.1/", "'http://…@192.0.2.1/' must"),
        ("DO_METADATA_URL", "http://[::1", "DO_METADATA_URL 'http://[::1' is no URL"),
        ("DO_API_RATE_LIMIT_QPS", "inf", "DO_API_RATE_LIMIT_QPS must be a positive number"),
        ("DO_API_RATE_LIMIT_QPS", "1e309", "DO_API_RATE_LIMIT_QPS must be a positive number"),
        ("DEFAULT_LB_TYPE", "X" * 5_000_000, f"{'X' * 60!r}… (5000000 bytes)"),
    ],
    ids=[
        "ipv6",
        "port",
        "http",
        "http-lookalike",
        "space",
        "no-host",
        "userinfo",
        "metadata-ipv6",
        "qps-inf",
        "qps-overflow",
        "lb-type-5MB",
    ],
)
def test_a_bad_variable_is_one_line_naming_it(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_environment({"DO_ACCESS_TOKEN": TOKEN, variable: value})

    assert message in str(raised.value) and variable in str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400
    assert TOKEN not in str(raised.value)


@pytest.mark.parametrize(
    "variables",
    [
        {"DO_ACCESS_TOKEN": TOKEN, "DO_OVERRIDE_URL": "https://[::1"},
        {"DO_ACCESS_TOKEN": TOKEN, "DO_OVERRIDE_URL": "http://192.0.2.1/"},
        {"DO_ACCESS_TOKEN": TOKEN, "DO_METADATA_URL": "http://[::1"},
        {"DO_ACCESS_TOKEN": TOKEN, "DO_API_RATE_LIMIT_QPS": "1e309"},
        {"DO_ACCESS_TOKEN_FILE": "not-utf8"},
        {"DO_ACCESS_TOKEN_FILE": "huge"},
        {"DO_ACCESS_TOKEN_FILE": "two-lines"},
        {"DO_ACCESS_TOKEN": TOKEN, "METRICS_ADDR": "0.0.0.0"},
        {"DO_ACCESS_TOKEN": TOKEN, "DEBUG_ADDR": "8080"},
        {"DO_ACCESS_TOKEN": TOKEN, "PUBLIC_ACCESS_FIREWALL_TAGS": "k8s-worker"},
    ],
    ids=[
        "ipv6",
        "http",
        "metadata-ipv6",
        "qps",
        "token-not-utf8",
        "token-huge",
        "token-lines",
        "metrics-addr",
        "debug-addr",
        "firewall-tags-alone",
    ],
)
def test_polyccm_refuses_a_bad_environment_in_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    files = _token_files(tmp_path)
    for name in ("DO_ACCESS_TOKEN", "DO_ACCESS_TOKEN_FILE", "DO_OVERRIDE_URL", "REGION",
                 "DO_METADATA_URL", "DO_API_RATE_LIMIT_QPS", "DEFAULT_LB_TYPE", "METRICS_ADDR",
                 "DEBUG_ADDR", "PUBLIC_ACCESS_FIREWALL_NAME",
                 "PUBLIC_ACCESS_FIREWALL_TAGS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, str(files[value][0]) if value in files else value)
    monkeypatch.setenv("REGION", "nyc3")

    result = run_polyccm(["--provider=digitalocean"])

    lines = result.stderr.splitlines()
    assert (result.status, result.stdout, len(lines)) == (2, "", 1), result.stderr[-2000:]
    assert lines[0].startswith("polyccm: error: ") and "Traceback" not in result.stderr
    assert any(name in lines[0] for name in variables) and TOKEN not in lines[0]
