"""The emulator's cheaper request intake changes what a request costs, never what moto makes of
it: each request the provider sends (long target and instance lists, nested security group
rules, filtered reads, a malformed one) is parsed into the same parameters, answered with the
same bytes and counted under the same action as with moto's own code.

The emulator runs in this process, so that moto's code can be put back for a moment."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from typing import Any

import boto3
from polyccm_aws_emulator.app import FaultInjector, build_app
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.moto_requests import PATCHED
from polyccm_aws_emulator.testing import emulator_in_this_process, moto_code_put_back


class _Recorder:
    """The URL, headers and body of each request a boto3 client sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, str], bytes]] = []

    def __call__(self, request: Any, **_: Any) -> None:
        body = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        self.sent.append((request.url, dict(request.headers), body))


def _post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    wanted = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    request = urllib.request.Request(url, data=body, headers=wanted, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, _without_ids(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, _without_ids(error.read())


def _without_ids(body: bytes) -> bytes:
    return re.sub(rb"<(RequestI[dD])>[^<]*</RequestI[dD]>", rb"<\1/>", body)


def _parsed(url_headers_body: tuple[str, dict[str, str], bytes], service: str) -> Any:
    """What moto's query parser makes of a request, as moto's dispatch asks it."""
    from moto.core.parse import PROTOCOL_PARSERS
    from moto.core.utils import get_service_model
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request

    body = url_headers_body[2]
    builder = EnvironBuilder(
        method="POST", data=body, content_type="application/x-www-form-urlencoded"
    )
    request = Request(builder.get_environ())
    model = get_service_model(service)
    operation = model.operation_model(request.form["Action"])
    parser = PROTOCOL_PARSERS[model.protocol](operation)
    return parser.parse(
        {
            "method": "POST",
            "values": request.values,
            "headers": request.headers,
            "body": request.data,
            "url_path": "/",
            "url_params": {},
        }
    )


def test_requests_are_parsed_and_answered_as_moto_alone_does(aws: EmulatorControl) -> None:
    """RegisterTargets and DeregisterTargets of 200 targets, a classic ELB's registration of
    300 instances, ingress rules nested three deep, DescribeInstances with filters and 300 ids,
    and a RegisterTargets with a port that is no number: the same parameters, the same answers
    (the error's too), with the emulator's intake and with moto's own."""
    del aws  # for its fake credentials and isolated boto3; the emulator here serves the calls
    with emulator_in_this_process() as url:
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        elb = boto3.client("elb", endpoint_url=url, region_name="us-east-1")
        elbv2 = boto3.client("elbv2", endpoint_url=url, region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/18")["Subnet"]["SubnetId"]
        group = ec2.create_security_group(GroupName="g", Description="g", VpcId=vpc)["GroupId"]
        peer = ec2.create_security_group(GroupName="p", Description="p", VpcId=vpc)["GroupId"]
        ids = [
            i["InstanceId"]
            for i in ec2.run_instances(
                ImageId="ami-12c6146b", MinCount=300, MaxCount=300, SubnetId=subnet
            )["Instances"]
        ]
        ec2.create_tags(Resources=ids[:7], Tags=[{"Key": "role", "Value": "a b+c%"}])
        arn = elbv2.create_target_group(
            Name="tg", Protocol="TCP", Port=30080, VpcId=vpc, TargetType="instance"
        )["TargetGroups"][0]["TargetGroupArn"]
        elb.create_load_balancer(
            LoadBalancerName="web",
            Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
            Subnets=[subnet],
        )
        recorded = {name: _Recorder() for name in ("elbv2", "elb", "ec2")}
        for name, client in (("ec2", ec2), ("elb", elb), ("elbv2", elbv2)):
            client.meta.events.register("before-send", recorded[name])
        targets = [{"Id": i, "Port": 30000 + n} for n, i in enumerate(ids[:200])]
        elbv2.register_targets(TargetGroupArn=arn, Targets=targets)
        elbv2.deregister_targets(TargetGroupArn=arn, Targets=targets[150:])
        elb.register_instances_with_load_balancer(
            LoadBalancerName="web", Instances=[{"InstanceId": i} for i in ids]
        )
        ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": 80, "ToPort": 81,
                 "IpRanges": [{"CidrIp": "10.1.0.0/16", "Description": "a b&c=d"},
                              {"CidrIp": "10.2.0.0/16"}],
                 "UserIdGroupPairs": [{"GroupId": peer, "Description": "peer"}]},
                {"IpProtocol": "-1", "Ipv6Ranges": [{"CidrIpv6": "::/0"}]},
            ],
        )  # fmt: skip
        ec2.describe_instances(
            InstanceIds=ids,
            Filters=[
                {"Name": "tag:role", "Values": ["a b+c%"]},
                {"Name": "instance-state-name", "Values": ["running", "pending"]},
            ],
        )
        ec2.describe_instances(Filters=[{"Name": "subnet-id", "Values": [subnet]}], MaxResults=50)
        broken = recorded["elbv2"].sent[0]
        broken = (broken[0], broken[1], broken[2].replace(b"Port=30000", b"Port=thirty", 1))
        sent = [(n, r) for n, rec in recorded.items() for r in rec.sent] + [("elbv2", broken)]
        assert len(sent) == 7, "every call was recorded"

        reads = [(n, r) for n, r in sent if b"Action=Describe" in r[2] or r is broken]
        fast_parsed = [_parsed(request, name) for name, request in sent[:-1]]
        fast_answers = [_post(*request) for _, request in reads]
        with moto_code_put_back(PATCHED):
            slow_parsed = [_parsed(request, name) for name, request in sent[:-1]]
            slow_answers = [_post(*request) for _, request in reads]
    for index, (ours, moto) in enumerate(zip(fast_parsed, slow_parsed, strict=True)):
        assert ours == moto, f"request {index} is parsed differently"
    assert fast_parsed[0]["Targets"][199] == {"Id": ids[199], "Port": 30199}
    assert len(fast_parsed[2]["Instances"]) == 300
    assert fast_parsed[3]["IpPermissions"][0]["IpRanges"][0]["Description"] == "a b&c=d"
    assert len(fast_parsed[4]["InstanceIds"]) == 300
    assert fast_answers == slow_answers
    assert fast_answers[0][0] == 200 and fast_answers[0][1].count(b"<instanceId>") == 7
    assert fast_answers[-1][0] >= 400, "a port that is no number is refused"


def test_the_action_is_found_as_a_full_parse_finds_it() -> None:
    """The fault injector reads the Action and Version of a request without decoding the
    rest, as ``parse_qs`` would: the first non-blank value, encoded values decoded, a name in
    an encoded form decoded too."""
    from urllib.parse import parse_qs

    queries = [
        "Action=RegisterTargets&Version=2015-12-01&Targets.member.1.Id=i-1",
        "Version=2016-11-15&Filter.1.Value.1=a%26Action%3DX&Action=DescribeInstances",
        "Action=&Action=Describe+Me&Version=2012-06-01",
        "Acti%6Fn=Encoded&Version=2016-11-15",
        "Version=2016-11-15&Action=a%20b=c",
        "Action",
        "",
        "&&Version=2016-11-15&Action=Run&Action=Other",
        "Version=2016-11-15&Filter.1.Name=tag%3Ax&Action=Later",
        "Version=1&Foo+Bar=1&Action=Later",
    ]
    for query in queries:
        full = parse_qs(query)
        expected = {k: full[k][0] for k in ("Action", "Version") if k in full}
        assert FaultInjector._action_and_version(query) == expected, query


def test_a_connection_carries_one_call_after_another_with_the_same_answers(
    aws: EmulatorControl,
) -> None:
    """On the emulator's own server the connection botocore opens stays open for its next
    calls (werkzeug closed each after one answer), and the calls it carries are answered with
    werkzeug's bytes, counted, and failed on request, as before."""
    import http.client

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    del aws  # for its fake credentials and isolated boto3; the emulator here serves the calls
    server = make_server(
        "127.0.0.1", 0, build_app(), threaded=True, request_handler=MotoRequestHandler
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    control = EmulatorControl(url)
    try:
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        recorder = _Recorder()
        ec2.meta.events.register("before-send", recorder)
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=3, MaxCount=3)
        ec2.describe_instances()
        _, headers, body = recorder.sent[-1]
        control.reset_calls()
        control.inject("DescribeInstances", count=1)

        connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
        answers = []
        for _ in range(3):
            connection.request("POST", "/", body=body, headers=headers)
            if not answers:
                opened = connection.sock
            answer = connection.getresponse()
            answers.append((answer.status, _without_ids(answer.read())))
            assert connection.sock is opened, "the connection stayed open"
        connection.close()
        with moto_code_put_back(PATCHED):
            werkzeug_answer = _post(url, headers, body)
        assert control.calls()["DescribeInstances"] == 4, "each call is counted"
    finally:
        control.reset()  # moto's state lives in this process: leave none behind
        server.shutdown()
        server.server_close()
    assert answers[0][0] == 503 and b"RequestLimitExceeded" in answers[0][1]
    assert answers[1] == answers[2] == werkzeug_answer
    assert werkzeug_answer[1].count(b"<instanceId>") == 3
