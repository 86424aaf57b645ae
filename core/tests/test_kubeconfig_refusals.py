"""Kubeconfigs polyccm cannot use are refused when it starts: one line naming the file and the
field at fault, no traceback, no secret (issue 22). Each test goes through the public entry
points only (``load_configuration``, whose error is the line the ``polyccm`` command prints, and
the command itself), so they hold whatever reads the kubeconfig underneath.

Upstream, client-go v0.35.4 decodes a kubeconfig into typed structs
(tools/clientcmd/api/v1/types.go:31-52 Config, :65-93 Cluster, :96-147 AuthInfo, :150-165
Context; decoded at tools/clientcmd/loader.go:442), so a field of the wrong type makes the file
unusable; it refuses a CA that is not PEM (transport/transport.go:252-265 rootCertPool) and a
client certificate and key that are no PEM pair (transport/transport.go:137 tls.X509KeyPair)
when it builds its transport, before any request."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import KubeconfigError, load_configuration
from polyccm_testing.devenv import pki
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN

SECRET = "s3cr3t-T0KEN-never-shown"


def kubeconfig_document(server: str = "https://127.0.0.1:1") -> dict[str, Any]:
    """A usable kubeconfig (its server unreachable), authenticating with :data:`SECRET`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def refusal(path: Path) -> str:
    """The one-line reason ``load_configuration`` refuses the kubeconfig ``path`` with."""
    with pytest.raises(KubeconfigError) as refused:
        load_configuration(str(path))
    line = str(refused.value)
    assert "\n" not in line and SECRET not in line, line
    assert str(path) in line, line
    return line


# -- fields of the wrong type -----------------------------------------------------------------

WRONG_TYPES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("users", lambda d: d.update(users=42), "users: must be a list, got int"),
    ("clusters", lambda d: d.update(clusters="x"), "clusters: must be a list, got str"),
    (
        "context",
        lambda d: d["contexts"][0].update(context=["c", "u"]),
        "contexts[0].context: must be a mapping, got list",
    ),
    (
        "token",
        lambda d: d["users"][0].update(user={"token": 5}),
        "users[0].user.token: must be a string, got int",
    ),
    (
        "server",
        lambda d: d["clusters"][0]["cluster"].update(server=[1]),
        "clusters[0].cluster.server: must be a string, got list",
    ),
    (
        "insecure",
        lambda d: d["clusters"][0]["cluster"].update({"insecure-skip-tls-verify": "yes"}),
        "clusters[0].cluster.insecure-skip-tls-verify: must be a boolean (true or false), got str",
    ),
    (
        "groups",
        lambda d: d["users"][0]["user"].update({"as": "jane", "as-groups": "admins"}),
        "users[0].user.as-groups: must be a list, got str",
    ),
    (
        "exec-args",
        lambda d: d["users"][0].update(user={"exec": {"command": "x", "args": "--flag"}}),
        "users[0].user.exec.args: must be a list, got str",
    ),
]


@pytest.mark.parametrize(
    ("change", "reason"), [case[1:] for case in WRONG_TYPES], ids=[case[0] for case in WRONG_TYPES]
)
def test_a_field_of_the_wrong_type_is_named_with_its_path(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    document = kubeconfig_document()
    change(document)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))

    assert refusal(path) == f"cannot load kubeconfig {path}: {reason}"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        pytest.param(b"[1, 2]\n", ("mapping", "got list"), id="a list"),
        pytest.param(b"just words\n", ("mapping", "got str"), id="a scalar"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, ("nest",), id="deep"),
        pytest.param(b"{a: " * 50_000 + b"1" + b"}" * 50_000, ("nest",), id="deep-maps"),
        pytest.param(b"\x80\x81kind: Config\xc3\x28\n", ("not UTF-8",), id="not-utf8"),
        pytest.param(
            f"users:\n- name: u\n  user: {{token: {SECRET}: x}}\n".encode(),
            ("not valid YAML", "line 3"),
            id="yaml-error-on-a-secret-line",
        ),
    ],
)
def test_a_file_that_is_no_kubeconfig_is_one_line_without_its_text(
    tmp_path: Path, content: bytes, words: tuple[str, ...]
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)

    line = refusal(path)

    assert line.startswith(f"cannot load kubeconfig {path}: ")
    for word in words:
        assert word in line, line
    assert len(line) < 200, line


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        pytest.param(
            lambda d: d.update({"current-context": "x" * 5_000_000}),
            "context 'xxxx",
            id="5MB-context-name",
        ),
        pytest.param(
            lambda d: d["clusters"][0]["cluster"].update({"certificate-authority": "a\nb" * 2}),
            "certificate-authority ",
            id="line-break-in-a-path",
        ),
        pytest.param(
            lambda d: d["users"][0]["user"].update({"auth-provider": {"name": "\x1b[2J" * 99}}),
            "auth-provider '\\x1b[2J",
            id="terminal-escape-in-a-name",
        ),
    ],
)
def test_values_a_refusal_shows_are_cut_and_kept_on_one_line(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], shown: str
) -> None:
    document = kubeconfig_document()
    change(document)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))

    line = refusal(path)

    assert shown in line, line
    assert len(line) < 400 and line.isprintable(), line


def test_utf16_with_a_byte_order_mark_is_read_as_yaml_allows(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(yaml.safe_dump(kubeconfig_document("http://127.0.0.1:1")).encode("utf-16"))

    assert load_configuration(str(path)).authorization() == f"Bearer {SECRET}"


# -- certificates and keys --------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    """A CA certificate with its key, and another key that matches nothing of it."""
    return pki.generate(tmp_path_factory.mktemp("pki"))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tls_cases(keys: pki.Pki, folder: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any], str]]:
    """Per case: the cluster's and the user's TLS fields, and what the refusal names."""
    certificate, key = keys.ca_cert.read_bytes(), keys.ca_key.read_bytes()
    other_key = keys.service_account_key.read_bytes()
    garbage = folder / "garbage.crt"
    garbage.write_text("not a certificate\n")
    pair = {"client-certificate-data": b64(certificate), "client-key-data": b64(key)}
    return {
        "ca-not-base64": (
            {"certificate-authority-data": "***"}, {},
            "cluster 'c': certificate-authority-data is not base64",
        ),
        "ca-not-pem": (
            {"certificate-authority-data": b64(b"hello")}, {},
            "cluster 'c': certificate-authority-data is not a PEM certificate",
        ),
        "ca-file-not-pem": (
            {"certificate-authority": str(garbage)}, {},
            f"cluster 'c': certificate-authority {garbage} is not a PEM certificate",
        ),
        "ca-is-a-key": (
            {"certificate-authority-data": b64(key)}, {},
            "cluster 'c': certificate-authority-data is not a PEM certificate",
        ),
        "cert-not-pem": (
            {}, {**pair, "client-certificate-data": b64(b"junk")},
            "user 'u': client-certificate-data is not a PEM certificate",
        ),
        "key-not-pem": (
            {}, {**pair, "client-key-data": b64(b"junk")},
            "user 'u': client-key-data is not a PEM private key matching client-certificate-data",
        ),
        "key-of-another-certificate": (
            {}, {**pair, "client-key-data": b64(other_key)},
            "user 'u': client-key-data is not a PEM private key matching client-certificate-data",
        ),
        "key-not-base64": (
            {}, {**pair, "client-key-data": "%%%"},
            "user 'u': client-key-data is not base64",
        ),
        "cert-without-key": (
            {}, {"client-certificate-data": b64(certificate)},
            "user 'u': client-certificate-data without client-key or client-key-data",
        ),
    }  # fmt: skip


TLS_CASES = [
    "ca-not-base64",
    "ca-not-pem",
    "ca-file-not-pem",
    "ca-is-a-key",
    "cert-not-pem",
    "key-not-pem",
    "key-of-another-certificate",
    "key-not-base64",
    "cert-without-key",
]


@pytest.mark.parametrize("case", TLS_CASES)
def test_a_certificate_or_key_that_cannot_work_is_refused_naming_the_field_and_entry(
    tmp_path: Path, keys: pki.Pki, case: str
) -> None:
    cluster_fields, user_fields, reason = tls_cases(keys, tmp_path)[case]
    document = kubeconfig_document()
    document["clusters"][0]["cluster"].update(cluster_fields)
    document["users"][0]["user"].update(user_fields)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))

    assert refusal(path) == f"cannot load kubeconfig {path}: {reason}"


def test_a_good_certificate_and_key_are_used(tmp_path: Path, keys: pki.Pki) -> None:
    document = kubeconfig_document()
    document["clusters"][0]["cluster"]["certificate-authority"] = str(keys.ca_cert)
    document["users"][0]["user"].update(
        {
            "client-certificate-data": b64(keys.ca_cert.read_bytes()),
            "client-key-data": b64(keys.ca_key.read_bytes()),
        }
    )
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))

    configuration = load_configuration(str(path))

    assert configuration.cert_file and configuration.key_file
    assert Path(configuration.key_file).read_bytes() == keys.ca_key.read_bytes()


# -- what polyccm would silently not do -------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # client-go v0.35.4 tools/clientcmd/helpers.go:38-50 takes http, https and socks5
        # proxy-urls; the package's urllib3 needs PySocks for socks5, not installed here.
        pytest.param(
            lambda d: d["clusters"][0]["cluster"].update({"proxy-url": "socks5://proxy:1080"}),
            "cluster 'c': proxy-url is not supported: socks5://proxy:1080 (SOCKS proxies need",
            id="socks5-proxy-url",
        ),
        # client-go v0.35.4 tools/clientcmd/validation.go:342-345: impersonating groups, a uid
        # or extras needs a user to impersonate.
        pytest.param(
            lambda d: d["users"][0]["user"].update({"as-groups": ["admins"]}),
            "user 'u': as-uid, as-groups or as-user-extra without as",
            id="groups-without-as",
        ),
        pytest.param(
            lambda d: d["users"][0]["user"].update({"as-uid": "42"}),
            "user 'u': as-uid, as-groups or as-user-extra without as",
            id="uid-without-as",
        ),
        pytest.param(
            lambda d: d["users"][0]["user"].update({"as": "jane\r\nX-Injected: 1"}),
            "user 'u': as has a control character",
            id="as-with-a-line-break",
        ),
        # client-go v0.35.4 plugin/pkg/client/auth/exec/exec.go:240-243 refuses to run an
        # "Always" interactive plugin without a terminal; the package would run it anyway.
        pytest.param(
            lambda d: d["users"][0].update(
                user={"exec": {"command": "x", "apiVersion": "v1", "interactiveMode": "Always"}}
            ),
            "user 'u': exec.interactiveMode Always needs a terminal on standard input",
            id="interactive-exec-plugin",
        ),
        # http.client would refuse the header at each request, quoting the token in its error.
        pytest.param(
            lambda d: d["users"][0]["user"].update({"token": f"{SECRET}\r\nX-Injected: 1"}),
            "user 'u': token has a control character",
            id="token-with-a-line-break",
        ),
    ],
)
def test_what_would_be_silently_ignored_is_refused(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    document = kubeconfig_document()
    change(document)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))

    assert refusal(path).startswith(f"cannot load kubeconfig {path}: {reason}")


# -- KUBECONFIG -------------------------------------------------------------------------------


@pytest.fixture
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)


def test_kubeconfig_files_that_do_not_exist_are_named_with_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_a_pod: None
) -> None:
    # client-go v0.35.4 tools/clientcmd/loader.go:217-244: files of KUBECONFIG that do not
    # exist are skipped (only listed in a warning when none exists), the others merged.
    one, two = tmp_path / "one", tmp_path / "two"
    for listed in ([one], [one, two], [one, tmp_path / "sub" / "three", two]):
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, listed)))
        with pytest.raises(KubeconfigError) as refused:
            load_configuration()
        line = str(refused.value)
        assert "KUBECONFIG" in line and "\n" not in line, line
        for path in listed:
            assert str(path) in line, line

    good = tmp_path / "good"
    good.write_text(yaml.safe_dump(kubeconfig_document("http://127.0.0.1:1")))
    for listed in ([one, good], [good, one], [one, good, two]):
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, listed)))
        assert load_configuration().authorization() == f"Bearer {SECRET}"


def test_a_bad_file_listed_in_kubeconfig_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_a_pod: None
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text(yaml.safe_dump(kubeconfig_document("http://127.0.0.1:1")))
    bad.write_text("users: 42\n")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, (tmp_path / "missing", good, bad))))

    with pytest.raises(KubeconfigError) as refused:
        load_configuration()

    line = str(refused.value)
    assert f"kubeconfig {bad} (listed in KUBECONFIG): users: must be a list, got int" in line


# -- exec plugins -----------------------------------------------------------------------------


def plugin(tmp_path: Path, body: str, *, executable: bool = True) -> dict[str, Any]:
    """An exec section running the Python ``body`` (given :data:`SECRET` as its argument)."""
    script = tmp_path / "plugin"
    script.write_text(f"#!{sys.executable}\nimport os, signal, sys\n{body}\n")
    if executable:
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": str(script),
        "args": [f"--password={SECRET}"],
    }


EXEC_FAILURES = {
    "exit-code": (
        f"sys.stderr.write('login failed for password {SECRET}\\n'); sys.exit(3)",
        "failed with exit code 3",
    ),
    "signal": (
        f"sys.stderr.write('{SECRET}\\n'); sys.stderr.flush(); "
        "os.kill(os.getpid(), signal.SIGKILL)",
        "killed by SIGKILL",
    ),
    "not-an-exec-credential": (f"print('token={SECRET}')", "not an ExecCredential"),
    "wrong-kind": (
        f'print(\'{{"kind": "Secret", "data": "{SECRET}"}}\')',
        "not an ExecCredential",
    ),
}


@pytest.mark.parametrize("case", list(EXEC_FAILURES))
def test_a_failing_exec_plugin_is_said_to_fail_without_what_it_printed(
    tmp_path: Path, case: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # client-go v0.35.4 plugin/pkg/client/auth/exec/exec.go:548-575 says a plugin "failed with
    # exit code N" without its output; it connects the plugin's stderr to its own (:459), which
    # polyccm does not: its stderr is its (masked) log and a one-line error at start.
    body, how = EXEC_FAILURES[case]
    document = kubeconfig_document()
    document["users"][0]["user"] = {"exec": plugin(tmp_path, body)}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))

    line = refusal(path)

    assert f"user 'u': exec plugin {tmp_path / 'plugin'}" in line and how in line, line
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err


def test_an_exec_plugin_that_cannot_run_is_said_so(tmp_path: Path) -> None:
    document = kubeconfig_document()
    document["users"][0]["user"] = {"exec": plugin(tmp_path, "print('{}')", executable=False)}
    not_executable = tmp_path / "not-executable"
    not_executable.write_text(yaml.safe_dump(document))
    document["users"][0]["user"]["exec"]["command"] = str(tmp_path / "nonexistent")
    not_found = tmp_path / "not-found"
    not_found.write_text(yaml.safe_dump(document))

    assert "Permission denied" in refusal(not_executable)
    assert "executable not found" in refusal(not_found)


# -- the command ------------------------------------------------------------------------------


def run_polyccm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FAKE_MAIN, "--configure-cloud-routes=false", "--secure-port=0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_polyccm_exits_2_with_one_line_for_each_kind_of_bad_kubeconfig(
    tmp_path: Path, keys: pki.Pki
) -> None:
    bad: dict[str, bytes] = {}
    document = kubeconfig_document()
    document["users"] = 42
    bad["wrong-type"] = yaml.safe_dump(document).encode()
    bad["deep"] = b"[" * 100_000 + b"]" * 100_000
    bad["not-utf8"] = b"\x80\x81\xc3\x28"
    document = kubeconfig_document()
    document["users"][0]["user"]["client-certificate-data"] = b64(b"not a certificate")
    document["users"][0]["user"]["client-key-data"] = b64(keys.ca_key.read_bytes())
    bad["not-pem"] = yaml.safe_dump(document).encode()
    document = kubeconfig_document()
    document["users"][0]["user"]["as"] = "jane"
    document["clusters"][0]["cluster"]["proxy-url"] = "socks5://proxy:1080"
    bad["proxy-url"] = yaml.safe_dump(document).encode()
    document = kubeconfig_document()
    document["users"][0]["user"] = {
        "exec": plugin(tmp_path, f"sys.stderr.write('{SECRET}\\n'); sys.exit(1)")
    }
    bad["exec"] = yaml.safe_dump(document).encode()

    for name, content in bad.items():
        path = tmp_path / name
        path.write_bytes(content)
        result = run_polyccm(f"--kubeconfig={path}")
        assert result.returncode == 2, (name, result.stderr)
        assert result.stderr.count("\n") == 1, (name, result.stderr)
        assert result.stderr.startswith(f"polyccm: error: cannot load kubeconfig {path}: ")
        assert SECRET not in result.stderr + result.stdout, name

    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    environment["KUBECONFIG"] = str(tmp_path / "missing")
    result = run_polyccm(env=environment)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "KUBECONFIG" in result.stderr and str(tmp_path / "missing") in result.stderr
