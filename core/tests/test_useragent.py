"""The name a process gives the cloud: its leader-election identity, in upstream's form
(kubernetes/cloud-provider app/controllermanager.go:236-241 @4666611: host name, ``_``, a UUID),
carried by the User-Agent of its cloud calls and read back from one."""

from __future__ import annotations

import socket

from polyccm import useragent
from polyccm.version import version


def test_the_identity_is_upstreams_form_and_the_user_agent_carries_it() -> None:
    host, _, unique = useragent.IDENTITY.rpartition("_")
    assert host == socket.gethostname()
    assert len(unique) == 36
    agent = useragent.cloud_user_agent()
    assert agent == f"polyccm/{version()} polyccm-identity/{useragent.IDENTITY}"
    # As an SDK sends it: our part first or last among its own products.
    assert useragent.caller_of(f"{agent} gl-python/3.11 gax/2.44") == useragent.IDENTITY
    assert useragent.caller_of(f"Boto3/1.35 md/Botocore#1.35 {agent}") == useragent.IDENTITY


def test_a_user_agent_naming_no_process_names_none() -> None:
    assert useragent.caller_of("python-requests/2.32") is None
    assert useragent.caller_of("polyccm-identity/") is None
    assert useragent.caller_of("") is None
