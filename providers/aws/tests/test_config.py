"""The cloud config parser: upstream files parse unchanged; mistakes name the file and line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from polyccm.errors import ConfigError
from polyccm_aws.config import CloudConfig, load_cloud_config, parse_cloud_config
from polyccm_testing.opstools import run_polyccm, unreadable_files

UPSTREAM_STYLE = """\
; a cloud.conf as written for cloud-provider-aws
[Global]
Zone = us-west-2a
VPC = vpc-0123
SubnetID = subnet-0123
RouteTableID = rtb-0123
RoleARN = arn:aws:iam::123456789012:role/ccm
KubernetesClusterID = prod
DisableSecurityGroupIngress
ElbSecurityGroup = "sg-0123"   # shared group
NodeIPFamilies = ipv4
NodeIPFamilies = ipv6
ClusterServiceLoadBalancerHealthProbeMode = Shared
ClusterServiceSharedLoadBalancerHealthProbePort = 10256
NLBSecurityGroupMode = Managed

[ServiceOverride "1"]
Service = ec2
Region = us-west-2
URL = https://ec2.example.internal
SigningRegion = us-west-2

[ServiceOverride "2"]
Service = Elastic Load Balancing v2
Region = us-west-2
URL = https://elbv2.example.internal
SigningRegion = us-west-2
SigningName = elasticloadbalancing
"""


def test_upstream_config_parses_unchanged() -> None:
    config = parse_cloud_config(UPSTREAM_STYLE, "cloud.conf")

    assert config.zone == "us-west-2a"
    assert config.vpc == "vpc-0123"
    assert config.subnet_id == "subnet-0123"
    assert config.route_table_id == "rtb-0123"
    assert config.role_arn.endswith(":role/ccm")
    assert config.cluster_id == "prod"
    assert config.disable_security_group_ingress is True
    assert config.elb_security_group == "sg-0123"
    assert config.node_ip_families == ("ipv4", "ipv6")
    assert config.cluster_service_load_balancer_health_probe_mode == "Shared"
    assert config.nlb_security_groups_managed
    ec2 = config.endpoint_for("ec2", "us-west-2")
    assert ec2 is not None and ec2.url == "https://ec2.example.internal"
    elbv2 = config.endpoint_for("elbv2", "us-west-2")
    assert elbv2 is not None and elbv2.signing_name == "elasticloadbalancing"
    assert config.endpoint_for("elb", "us-west-2") is None
    assert config.endpoint_for("ec2", "eu-west-1") is None


def test_defaults_without_a_file() -> None:
    config = load_cloud_config(None)

    assert config == CloudConfig()
    assert config.node_ip_families == ("ipv4",)
    assert config.cluster_id == ""


def test_names_are_case_insensitive_and_booleans_spelled_many_ways() -> None:
    config = parse_cloud_config(
        "[global]\nkubernetesclustertag = old\ndisablesecuritygroupingress = yes\n"
    )

    assert config.cluster_id == "old"
    assert config.uses_legacy_tags
    assert config.disable_security_group_ingress is True


def test_legacy_service_name_covers_both_load_balancer_apis() -> None:
    config = parse_cloud_config(
        '[ServiceOverride "lb"]\nService = elasticloadbalancing\nRegion = r1\n'
        "URL = http://127.0.0.1:1\nSigningRegion = r1\n"
    )

    assert config.endpoint_for("elb", "r1") is not None
    assert config.endpoint_for("elbv2", "r1") is not None


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[Global\n", 1, "malformed section header"),
        ("Zone = a\n", 1, "outside of a section"),
        ("[Global]\nDisableSecurityGroupIngress = perhaps\n", 2, "not a boolean"),
        ("[Global]\nNodeIPFamilies = ipv5\n", 2, "ipv5"),
        ("[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = many\n", 2, "integer"),
        ("[Global]\nClusterServiceLoadBalancerHealthProbeMode = Sometimes\n", 2, "Shared"),
        ("[Global]\nNLBSecurityGroupMode = Unmanaged\n", 2, "Managed"),
        ('[Global]\nVPC = "vpc-1\n', 2, "unterminated"),
        ("[Global]\n= value\n", 2, "Key = value"),
        ('\n[ServiceOverride "1"]\nService = ec2\nRegion = r\n', 2, "missing URL"),
        (
            '[ServiceOverride "1"]\nService=ec2\nRegion=r\nURL=http://a\nSigningRegion=r\n'
            '[ServiceOverride "2"]\nService=EC2\nRegion=r\nURL=http://b\nSigningRegion=r\n',
            6,
            "duplicate ServiceOverride",
        ),
        ('[ServiceOverride "1"]\nService=ec2\nRegion=r\nURL=ftp://a\nSigningRegion=r\n', 1, "http"),
        (
            "[Global]\nKubernetesClusterTag = a\nRegion = r\nKubernetesClusterID = b\n",
            4,
            "name different clusters",
        ),
    ],
)
def test_mistakes_name_file_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        parse_cloud_config(text, "/etc/kubernetes/cloud.conf")

    assert error.value.path == "/etc/kubernetes/cloud.conf"
    assert error.value.line == line
    assert str(error.value).startswith(f"/etc/kubernetes/cloud.conf:{line}: ")


def test_unknown_keys_and_sections_are_warned_about_and_ignored_never_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # cloud-provider-aws v1.35.0 pkg/providers/v1/aws.go:534-546 (readAWSCloudConfig) reads
    # with gcfg.FatalOnly: gopkg.in/gcfg.v1 v1.2.3 errors.go:5-20 keeps only fatal errors, and
    # set.go:226-229, :259-263 and :269-273 report an unknown section, subsection or variable
    # as extraData, which is not fatal. Upstream drops them silently; polyccm says so.
    text = (
        "[Global]\n"
        "Region = eu-west-1\n"
        "Regoin = s3cr3t-looking-value\n"
        '[Global "extra"]\n'
        "Zone = ignored-with-its-section\n"
        "[Globl]\n"
        "VPC = vpc-ignored\n"
        '[ServiceOverride "1"]\n'
        "Service = ec2\nRegion = eu-west-1\nURL = https://ec2.internal\nSigningRegion = eu-west-1\n"
        "Colour = red\n"
    )
    with caplog.at_level(logging.WARNING):
        config = parse_cloud_config(text, "/etc/kubernetes/cloud.conf")

    assert config.region == "eu-west-1"
    assert config.zone == "" and config.vpc == ""
    assert [override.url for override in config.service_overrides] == ["https://ec2.internal"]
    assert caplog.messages == [  # the sections as the file is read, then the keys
        """/etc/kubernetes/cloud.conf:4: unknown section [Global "extra"] is ignored, """
        "with its keys",
        "/etc/kubernetes/cloud.conf:6: unknown section [Globl] is ignored, with its keys",
        "/etc/kubernetes/cloud.conf:3: unknown key 'Regoin' in [Global] is ignored",
        "/etc/kubernetes/cloud.conf:13: unknown key 'Colour' in [ServiceOverride \"1\"] is ignored",
    ]
    assert "s3cr3t" not in caplog.text, "a value is never logged"


def test_a_broken_file_is_its_error_alone_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = '[Globl]\nX = 1\n[Global]\nRegoin = r\nVPC = "open\n'

    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="unterminated"):
        parse_cloud_config(text, "/etc/kubernetes/cloud.conf")

    assert caplog.messages == []


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read cloud config"):
        load_cloud_config(tmp_path / "missing.conf")


def test_file_is_read_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "cloud.conf"
    path.write_text("[Global]\nRegion = eu-central-1\nKubernetesClusterID = \\\n  split\n")

    config = load_cloud_config(path)

    assert config.region == "eu-central-1"
    assert config.cluster_id == "split"


def test_the_shipped_example_leaves_the_cluster_id_to_the_instance_tags() -> None:
    """A fixed id in the example would be copied into every cluster of an account, which would
    then share target-group names; unset, the id comes from each cluster's instance tags."""
    example = Path(__file__).parents[3] / "deploy" / "kustomize" / "overlays" / "aws" / "cloud.conf"

    config = load_cloud_config(example)

    assert config.cluster_id == ""
    assert "KubernetesClusterID" in example.read_text()  # shown, commented, explained


# -- bad input: one line, exit 2, or upstream's reading with a warning -----------------------


def test_a_cloud_config_that_is_not_utf8_or_too_large_is_one_line(tmp_path: Path) -> None:
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        with pytest.raises(ConfigError) as raised:
            load_cloud_config(case.path)

        assert str(raised.value) == f"{case.path}: {case.message}", name


def test_a_key_or_section_given_twice_is_read_as_gcfg_reads_it_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # cloud-provider-aws v1.35.0 pkg/providers/v1/aws.go:534-546 (readAWSCloudConfig) reads the
    # file with gcfg.FatalOnly(gcfg.ReadInto(...)). gopkg.in/gcfg.v1 v1.2.3 read.go:127 and
    # :173 call set() for every header and every "name = value" line, and set.go:217-329 looks
    # the section up again (a second [Global] is the same struct) and assigns a single-valued
    # field again (set.go:292 vVal = vVar, :308-317 the setter): the last value wins and
    # nothing is reported. NodeIPFamilies, a []string, appends (set.go:277, :325-327).
    text = (
        "[Global]\n"
        "Region = us-east-1\n"
        "NodeIPFamilies = ipv4\n"
        '[ServiceOverride "1"]\n'
        "Service = ec2\nRegion = eu-west-1\nURL = https://first.internal\n"
        "SigningRegion = eu-west-1\n"
        "url = https://second.internal\n"
        "[global]\n"
        "REGION = eu-west-1\n"
        "NodeIPFamilies = ipv6\n"
        '[ServiceOverride "1"]\n'
        "SigningRegion = eu-west-1\n"
    )
    with caplog.at_level(logging.WARNING):
        config = parse_cloud_config(text, "/etc/kubernetes/cloud.conf")

    assert config.region == "eu-west-1"
    assert config.node_ip_families == ("ipv4", "ipv6")
    assert [override.url for override in config.service_overrides] == ["https://second.internal"]
    assert caplog.messages == [
        "/etc/kubernetes/cloud.conf:10: section [global] is given again (first on line 1): its "
        "keys are read as those of one section, as upstream's gcfg reads them",
        '/etc/kubernetes/cloud.conf:13: section [ServiceOverride "1"] is given again (first on '
        "line 4): its keys are read as those of one section, as upstream's gcfg reads them",
        "/etc/kubernetes/cloud.conf:9: key 'url' in [ServiceOverride \"1\"] is given again "
        "(first on line 7): the last value is used, as upstream's gcfg uses it",
        "/etc/kubernetes/cloud.conf:11: key 'REGION' in [Global] is given again (first on line "
        "2): the last value is used, as upstream's gcfg uses it",
        "/etc/kubernetes/cloud.conf:14: key 'SigningRegion' in [ServiceOverride \"1\"] is given "
        "again (first on line 8): the last value is used, as upstream's gcfg uses it",
    ]
    assert "second.internal" not in caplog.text, "a value is never logged"


FIVE_MB = "c" * 5_000_000


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # The id goes into the tag key kubernetes.io/cluster/<id> (cloud-provider-aws v1.35.0
        # pkg/providers/v1/tags.go:337-340, for KubernetesClusterTag too), and an EC2 tag key is
        # at most 128 characters ("Tag restrictions",
        # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html): 128 - 22 = 106.
        (
            f"KubernetesClusterID = {FIVE_MB}",
            f"KubernetesClusterID: {'c' * 60!r}… (5000000 bytes) is longer than 106 characters",
        ),
        (f"KubernetesClusterTag = {'t' * 107}", "is longer than 106 characters"),
        ('KubernetesClusterID = "a\\tb"', "'a\\tb' holds control characters"),
        # STS AssumeRole takes an IAM role's ARN (botocore 1.44.8 sts service-2.json arnType:
        # 20 to 2048 characters); upstream passes RoleARN to it unchecked, and every call fails.
        ("RoleARN = not-an-arn", "'not-an-arn' is no IAM role ARN"),
        ("RoleARN = arn:aws:s3:::my-bucket", "'arn:aws:s3:::my-bucket' is no IAM role ARN"),
        ("SourceARN = s3:bucket", "'s3:bucket' is no ARN"),
        # botocore 1.44.8 utils.py validate_region_name: a region is a host label; boto3
        # refuses any other (InvalidRegionError) when the first client is made.
        ("Region = bad region!/x", "'bad region!/x' is no AWS region"),
        ("Region = 12345", "'12345' is no AWS region"),
        # cloud-provider-aws v1.35.0 pkg/providers/v1/aws.go:548-561 (azToRegion) refuses a
        # Zone whose region cannot be read from it.
        ("Zone = not a zone", "'not a zone' is no availability zone"),
    ],
    ids=[
        "id-5MB",
        "tag-107",
        "id-control",
        "role-word",
        "role-s3",
        "source",
        "region",
        "region-digits",
        "zone",
    ],
)
def test_values_that_can_name_nothing_in_aws_are_one_line(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_cloud_config(f"[Global]\nVPC = vpc-1\n{line}\n", "/etc/cloud.conf")

    assert str(raised.value).startswith("/etc/cloud.conf:3: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400


def test_values_aws_takes_are_taken() -> None:
    config = parse_cloud_config(
        "[Global]\n"
        f"KubernetesClusterID = {'k' * 106}\n"
        "RoleARN = arn:aws-us-gov:iam::123456789012:role/path/to/ccm-role\n"
        "SourceARN = arn:aws:eks:us-east-1:123456789012:cluster/prod\n"
        "Region = us-gov-west-1\n"
        "Zone = us-gov-west-1a\n"
    )

    assert config.cluster_id == "k" * 106 and config.region == "us-gov-west-1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"[Global]\n\xff", "cloud config is not UTF-8 text (byte 0xff at offset 9)"),
        (
            b"[Global]\nKubernetesClusterID = " + b"c" * 900_000,
            "… (900000 bytes) is longer than 106 characters",
        ),
        (b"[Global]\nRoleARN = not-an-arn\n", "is no IAM role ARN"),
        (b"[Global]\nRegion = bad region!/x\n", "is no AWS region"),
        (
            b'[ServiceOverride "1"]\nService=ec2\nRegion=r\nURL=https://[::1\nSigningRegion=r\n',
            "URL 'https://[::1' is no URL: Invalid IPv6 URL",
        ),
    ],
    ids=["not-utf8", "id-900KB", "role", "region", "override-url"],
)
def test_polyccm_refuses_a_bad_cloud_config_in_one_line_and_exit_2(
    tmp_path: Path, text: bytes, message: str
) -> None:
    config = tmp_path / "cloud.conf"
    config.write_bytes(text)

    result = run_polyccm(["--provider=aws", f"--cloud-config={config}"])

    lines = result.stderr.splitlines()
    assert (result.status, result.stdout, len(lines)) == (2, "", 1), result.stderr[-2000:]
    assert lines[0].startswith(f"polyccm: error: {config}") and message in lines[0]
    assert len(lines[0]) < 500
