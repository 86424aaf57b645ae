"""polyccm.logredact: what the log would print of each kind of credential, and what stays
readable. The whole process at ``--v=10`` is tested end to end in tests/test_no_secrets_in_logs.py.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
import yaml
from polyccm import logredact
from polyccm.kube.api import KubeApi, RetryPolicy, load_configuration
from polyccm.logredact import MASK, RedactingFilter, add_secret, redact, secrets_in_environment

SESSION_TOKEN = "FQoGZXIvYXdzEBYaDNWapeRJuoclm7nxH/v5qqTczDEO54OtYLH8Mi0HSx/31QYE9kLTAf+I1T6=="
STS_SECRET = "IX8s8RGeaPiXJqKYkYTlxitwiIhci6astugTQIuK"
JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9."
    "eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0."
    "c2lnbmF0dXJlLWJ5dGVzLWhlcmU"
)
PEM_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA1x2b3c4d5e6f7g8h9i0jklmnopqrstuvwxyzABCDEFGHIJKL\n"
    "-----END RSA PRIVATE KEY-----\n"
)


def _kubeconfig(directory: Path, server: str, user: dict[str, str]) -> Path:
    """A kubeconfig in ``directory`` whose one context is ``user`` on ``server``."""
    path = directory / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(autouse=True)
def no_known_secrets() -> Iterator[None]:
    logredact.forget_secrets()
    yield
    logredact.forget_secrets()


def test_an_sts_answer_as_botocore_logs_it_keeps_ids_and_masks_the_credentials() -> None:
    body = (
        "b'<AssumeRoleResponse><AssumeRoleResult><Credentials>"
        "<AccessKeyId>ASIARZPUZDIKCUTHYSCC</AccessKeyId>"
        f"<SecretAccessKey>{STS_SECRET}</SecretAccessKey>"
        f"<SessionToken>{SESSION_TOKEN}</SessionToken>"
        "<Expiration>2026-12-01T13:23:46Z</Expiration></Credentials>"
        "<NextToken>page-2</NextToken></AssumeRoleResult></AssumeRoleResponse>'"
    )
    masked = redact(body)
    assert STS_SECRET not in masked and SESSION_TOKEN not in masked
    assert f"<SecretAccessKey>{MASK}</SecretAccessKey>" in masked
    assert "<AccessKeyId>ASIARZPUZDIKCUTHYSCC</AccessKeyId>" in masked
    assert "<NextToken>page-2</NextToken>" in masked, "pagination tokens are not credentials"


def test_a_signed_request_keeps_its_shape_and_loses_its_credentials() -> None:
    request = (
        "<AWSPreparedRequest method=POST, url=http://127.0.0.1:5000/, headers={"
        "'X-Amz-Date': b'20261201T122346Z', "
        f"'X-Amz-Security-Token': b'{SESSION_TOKEN}', "
        "'Authorization': b'AWS4-HMAC-SHA256 Credential=ASIA0000/20261201/us-east-1/ec2/"
        "aws4_request, SignedHeaders=host;x-amz-date, Signature=0a1b2c'}>"
    )
    masked = redact(request)
    assert SESSION_TOKEN not in masked and "Signature=0a1b2c" not in masked
    assert f"'X-Amz-Security-Token': b'{MASK}'" in masked
    assert "'X-Amz-Date': b'20261201T122346Z'" in masked
    # botocore's signer prints its canonical request, one header a line.
    canonical = (
        f"host:127.0.0.1\nx-amz-date:20261201T122346Z\nx-amz-security-token:{SESSION_TOKEN}\n"
    )
    assert redact(canonical) == (
        f"host:127.0.0.1\nx-amz-date:20261201T122346Z\nx-amz-security-token:{MASK}\n"
    )


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f'{{"SecretAccessKey": "{STS_SECRET}", "Code": "Success"}}', STS_SECRET),
        (f"{{'aws_secret_access_key': '{STS_SECRET}'}}", STS_SECRET),
        ("Authorization: Bearer k8s-admin-token-0123456789", "k8s-admin-token-0123456789"),
        (f"client-key-data: {base64.b64encode(PEM_KEY.encode()).decode()}", "LS0tLS1CRUdJTi"),
        (f"loaded {JWT} from the token file", JWT),
        (f"key file holds {PEM_KEY}", "MIIEpAIBAAKCAQEA"),
        ("https://sts/?X-Amz-Security-Token=abcdefgh12345678&Action=Get", "abcdefgh1234"),
        ("password=hunter2hunter2 user=admin", "hunter2hunter2"),
    ],
)
def test_secret_shapes_are_masked_without_knowing_the_value(text: str, secret: str) -> None:
    masked = redact(text)
    assert secret not in masked, masked
    assert MASK in masked


def test_known_values_are_masked_anywhere_even_url_encoded() -> None:
    add_secret(f"Bearer {SESSION_TOKEN}")
    masked = redact(f"x {SESSION_TOKEN} y; as a query: t={urllib.parse.quote(SESSION_TOKEN)}&a=1")
    assert "FQoGZXIv" not in masked
    # A short value guessed from a variable's name may be an ordinary word: never masked.
    add_secret("short", guessed=True)
    assert redact("a short message") == "a short message"


@pytest.mark.parametrize(
    ("secret", "text", "printed"),
    [
        ("Ab1", "METAL_LOCAL_ASN must be an AS number: 'Ab1'", "number: '***'"),
        ("hunter2", "password hunter2 refused", "password *** refused"),
        ("pw-42", "lease kube-system/pw-42 taken", "kube-system/*** taken"),
        ("hunter2", "hunter2x and xhunter2 are other words", "hunter2x and xhunter2 are other"),
        ("abc", "the abcde controller", "the abcde controller"),
    ],
)
def test_a_short_secret_named_as_one_is_masked_as_a_whole_word(
    secret: str, text: str, printed: str
) -> None:
    # Shorter than MIN_SECRET_LENGTH (a kubeconfig's basic-auth password, a token typed by
    # hand): masked where it stands alone, so that a secret echoed in an error does not show,
    # and left alone inside longer words, which it would garble.
    add_secret(secret)
    assert printed in redact(text)
    assert redact(f"[{secret}]") == f"[{MASK}]"


def test_one_or_two_characters_are_no_secret_worth_garbling_the_log() -> None:
    add_secret("t")
    add_secret("42")
    assert redact("can't reach 10.0.0.42: t 42") == "can't reach 10.0.0.42: t 42"


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("DO_OVERRIDE_URL 'http://user:s3cr3t@host/': not https", "'http://user:***@host/'"),
        ("URL ftp://admin:p@ss:w0rd@10.0.0.1:21/x is not http", "ftp://admin:***@10.0.0.1:21/x"),
        ("--master=https://kube:pw@lb.example.com:6443", "https://kube:***@lb.example.com:6443"),
        ("https://ci:tok@example.com?x=1 and http://a:b@c", "https://ci:***@example.com?x=1"),
    ],
)
def test_the_password_of_any_url_is_masked(text: str, printed: str) -> None:
    # Unknown to polyccm (it is not a setting of its own): masked by its place in the URL.
    masked = redact(text)
    assert printed in masked, masked
    assert "s3cr3t" not in masked and "w0rd" not in masked and ":tok@" not in masked


def test_a_url_without_a_password_is_left_alone() -> None:
    for text in (
        "https://10.0.0.1:6443/api",
        "ssh://git@github.com/x",
        "http://host:8080/a@b",
        "mailto:someone@example.com",
    ):
        assert redact(text) == text


def test_an_error_line_is_redacted_one_line_and_cut() -> None:
    add_secret(STS_SECRET)
    line = logredact.error_line("polyccm", ValueError(f"bad value\n{STS_SECRET}\tand more"))
    assert line == "polyccm: error: bad value *** and more"
    long = logredact.error_line("polyccm", "x" * 5_000_000)
    assert len(long) < 1100 and long.endswith("more characters)")


def test_ordinary_messages_are_left_alone() -> None:
    for message in (
        "cloud-node: initialised ip-10-0-0-1.ec2.internal (aws:///us-east-1a/i-0123456789abcdef0)",
        "Making request for OperationModel(name=DescribeInstances) with params: "
        "{'body': {'Action': 'DescribeInstances', 'Version': '2016-11-15'}, 'auth_type': None}",
        "service: ns/web: EnsuredLoadBalancer a0123456789abcdef0123456789abcd",
        "basic checks passed; token bucket refilled",
    ):
        assert redact(message) == message


@pytest.mark.parametrize(
    "text",
    [
        "argument --use-service-account-credentials: invalid boolean 'maybe' (use true or false)",
        "--authorization-kubeconfig: cannot load kubeconfig /etc/kubernetes/authz.conf",
        "cannot read --tls-private-key-file /etc/tls/tls.key: No such file or directory",
        "unrecognized arguments: --tls-private-key-file=/etc/tls/tls.key",
        "DO_ACCESS_TOKEN_FILE: cannot read /var/run/do/token: Permission denied",
        "/etc/gce.conf:4: token-url: 'ftp://x' is not an http(s) URL",
    ],
)
def test_error_lines_naming_secret_settings_stay_readable(text: str) -> None:
    # Every error line passes redact(): a setting whose name says "token" or "private key"
    # but whose value is a path, a URL or a flag's complaint is not a secret.
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("kubectl --token=abcdef0123 get nodes", "--token=***"),
        ("password: hunter2hunter2", "password: ***"),
        ("DO_ACCESS_TOKEN=dop_v1_0123", "DO_ACCESS_TOKEN=***"),
    ],
)
def test_settings_holding_secrets_are_still_masked_by_shape(text: str, printed: str) -> None:
    assert printed in redact(text)


def test_a_retry_warning_names_the_request_and_the_unreachable_server(tmp_path: Path) -> None:
    # A path whose last word names a secret (tokenreviews) is no key: the error after it, and the
    # host and port it names, stay readable.
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:1", {"token": "opaque-admin-token-42"})
    configuration = load_configuration(str(kubeconfig))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logredact.install([handler])
    logger = logging.getLogger("polyccm.kube.api")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    api = KubeApi(configuration, qps=0, retry=RetryPolicy(max_retries=2, initial_backoff=0.01))
    try:
        with pytest.raises(urllib3.exceptions.NewConnectionError):
            api.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body={})
    finally:
        api.close()
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines  # the warning, then the retry at debug level
    for line in lines:
        assert line.startswith(
            "POST /apis/authentication.k8s.io/v1/tokenreviews: HTTPSConnection(host='127.0.0.1', "
            "port=1): Failed to establish a new connection"
        ), line
        assert MASK not in line


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("GET /api/v1/namespaces/ns/secrets: timed out", "secrets: timed out"),
        ("service ns/web-token: EnsuredLoadBalancer", "web-token: EnsuredLoadBalancer"),
        (
            f"POST /v1/tokenreviews: token={SESSION_TOKEN}",
            f"POST /v1/tokenreviews: token={MASK}",
        ),
        (f"GET /v1/tokenreviews?token={STS_SECRET}", f"GET /v1/tokenreviews?token={MASK}"),
        (f"POST /v1/serviceaccounts/sa/token: {JWT}", f"POST /v1/serviceaccounts/sa/token: {MASK}"),
    ],
)
def test_a_path_ending_in_a_secret_word_is_kept_and_what_follows_it_still_masked(
    text: str, kept: str
) -> None:
    assert redact(text).endswith(kept)


def test_environment_secrets_are_found_by_name_not_references_to_them() -> None:
    found = secrets_in_environment(
        {
            "AWS_SECRET_ACCESS_KEY": "s1",
            "AWS_SESSION_TOKEN": "s2",
            "DO_ACCESS_TOKEN": "s3",
            "METAL_API_KEY": "s4",
            "AWS_ACCESS_KEY_ID": "id",
            "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token",
            "AWS_ROLE_ARN": "arn",
            "HOME": "/root",
        }
    )
    assert sorted(found) == ["s1", "s2", "s3", "s4"]


def test_the_filter_masks_arguments_tracebacks_and_stacks_for_any_formatter() -> None:
    add_secret(STS_SECRET)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logredact.install([handler])
    logredact.install([handler])  # idempotent
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    logger = logging.getLogger("polyccm.tests.logredact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("credentials %s and %r", STS_SECRET, {"SessionToken": SESSION_TOKEN})
        try:
            raise RuntimeError(f"refresh failed with key {STS_SECRET}")
        except RuntimeError:
            logger.exception("refresh failed")
        logger.error("where: %s", "here", stack_info=True)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    printed = stream.getvalue()
    assert STS_SECRET not in printed and SESSION_TOKEN not in printed
    assert "RuntimeError: refresh failed with key ***" in printed
    assert "Stack (most recent call last)" in printed


def test_the_kubernetes_token_and_client_key_are_known_secrets(tmp_path: Path) -> None:
    from polyccm.app.commandline import _kube_secrets
    from polyccm_testing.devenv import pki

    # A real pair: the kubeconfig loader refuses a certificate and key that are no PEM pair.
    keys = pki.generate(tmp_path / "pki")
    key = keys.ca_key.read_text()
    key_data = base64.b64encode(key.encode()).decode()
    user = {
        "token": "opaque-admin-token-42",
        "client-certificate-data": base64.b64encode(keys.ca_cert.read_bytes()).decode(),
        "client-key-data": key_data,
    }
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:6443", user)
    for value in _kube_secrets(load_configuration(str(kubeconfig))):
        add_secret(value)
    # Bare values, with no key name or shape to give them away: masked because they are known.
    bare_key_line = key.splitlines()[1]
    printed = redact(f"{kubeconfig.read_text()} sent opaque-admin-token-42, {bare_key_line}")
    assert "opaque-admin-token-42" not in printed
    assert key_data not in printed and bare_key_line not in printed


def test_a_long_blob_is_redacted_in_linear_time() -> None:
    # botocore logs whole answers; a long base64 run (user data, a certificate) once took
    # seconds per 10 kB, stalling every thread that logs.
    blob = "QUJD" * 50_000
    started = time.perf_counter()
    assert (
        redact(f"Response body: b'<Data>{blob}</Data>'") == f"Response body: b'<Data>{blob}</Data>'"
    )
    assert time.perf_counter() - started < 2.0


def test_uncaught_exceptions_of_the_polyccm_process_are_masked_too() -> None:
    token = "env-session-token-0123456789"
    program = (
        "import os, threading\n"
        "from polyccm.app.commandline import configure_logging\n"
        "configure_logging(10)\n"
        "def crash():\n"
        "    raise RuntimeError('thread saw ' + os.environ['AWS_SESSION_TOKEN'])\n"
        "worker = threading.Thread(target=crash, name='worker')\n"
        "worker.start(); worker.join()\n"
        "raise RuntimeError('main saw ' + os.environ['AWS_SESSION_TOKEN'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, "AWS_SESSION_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "uncaught exception in thread worker" in result.stderr
    assert "RuntimeError: thread saw ***" in result.stderr
    assert "RuntimeError: main saw ***" in result.stderr
    assert token not in result.stderr + result.stdout
