"""The environment, read as upstream reads it: one line naming the variable at fault."""

from __future__ import annotations

from pathlib import Path

import pytest
from polyccm.errors import ConfigError
from polyccm_digitalocean.config import DEFAULT_API_URL, read_environment

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


def test_the_token_may_come_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")

    config = read_environment({"DO_ACCESS_TOKEN_FILE": str(tmp_path / "token")})

    assert config.token == TOKEN and config.api_url == DEFAULT_API_URL


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({}, "DO_ACCESS_TOKEN"),
        ({"DO_ACCESS_TOKEN_FILE": "/nonexistent/token"}, "DO_ACCESS_TOKEN_FILE"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DO_OVERRIDE_URL": "http://127.0.0.1:1"}, "DO_OVERRIDE_URL"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DO_API_RATE_LIMIT_QPS": "-1"}, "DO_API_RATE_LIMIT_QPS"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DO_API_RATE_LIMIT_QPS": "fast"}, "DO_API_RATE_LIMIT_QPS"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DEFAULT_LB_TYPE": "GLOBAL"}, "DEFAULT_LB_TYPE"),
        ({"DO_ACCESS_TOKEN": TOKEN, "DEFAULT_LB_TYPE": "regional"}, "DEFAULT_LB_TYPE"),
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
