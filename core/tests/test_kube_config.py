"""Connection settings (polyccm.kube.config) against the real API server: kubeconfig forms, token
files that rotate, exec credential plugins, merged $KUBECONFIG files, in-cluster settings, and
one-line refusals of what cannot work."""

from __future__ import annotations

import base64
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube import config
from polyccm.kube.api import CONFIGMAPS, NAMESPACES, ApiError, KubeApi, load_configuration
from polyccm.kube.config import KubeconfigError, load_in_cluster


def write_kubeconfig(path: Path, control_plane: Any, user: dict[str, Any], **cluster: Any) -> Path:
    if "certificate-authority-data" not in cluster:
        cluster.setdefault("certificate-authority", str(control_plane.ca_cert))
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": control_plane.api_url, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def can_list_namespaces(kubeconfig: Path) -> bool:
    api = KubeApi(load_configuration(str(kubeconfig)), qps=0)
    try:
        api.list(NAMESPACES, limit=1)
        return True
    except ApiError as error:
        if error.status == 401:
            return False
        raise
    finally:
        api.close()


def test_certificate_authority_data_and_a_relative_path_both_reach_the_server(
    control_plane: Any, tmp_path: Path
) -> None:
    token = {"token": control_plane.admin_token}
    ca = Path(control_plane.ca_cert).read_bytes()
    inline = write_kubeconfig(
        tmp_path / "inline", control_plane, token,
        **{"certificate-authority-data": base64.b64encode(ca).decode()},
    )  # fmt: skip
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(ca)
    relative = write_kubeconfig(
        tmp_path / "relative", control_plane, token, **{"certificate-authority": "pki/ca.crt"}
    )

    assert can_list_namespaces(inline)
    assert can_list_namespaces(relative)
    written = load_configuration(str(inline)).ssl_ca_cert
    assert written is not None and stat.S_IMODE(os.stat(written).st_mode) == 0o600


def test_a_rotated_token_file_is_read_again(
    control_plane: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("not-a-valid-token\n")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, {"tokenFile": "token"})
    api = KubeApi(load_configuration(str(kubeconfig)), qps=0)
    try:
        with pytest.raises(ApiError) as refused:
            api.list(NAMESPACES, limit=1)
        assert refused.value.status == 401

        token_file.write_text(control_plane.admin_token + "\n")
        monkeypatch.setattr(config, "TOKEN_REREAD_SECONDS", 0.0)

        assert api.list(NAMESPACES, limit=1)["kind"] == "NamespaceList"
    finally:
        api.close()


def exec_plugin(tmp_path: Path, token: str, *, expires: str | None) -> dict[str, Any]:
    """A kubeconfig ``exec`` section running a script that counts its runs in ``runs``."""
    status: dict[str, Any] = {"token": token}
    if expires:
        status["expirationTimestamp"] = expires
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
              "status": status}  # fmt: skip
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, sys\n"
        "request = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert request['kind'] == 'ExecCredential', request\n"
        f"open({str(tmp_path / 'runs')!r}, 'a').write(os.environ['GREETING'] + '\\n')\n"
        f"print(json.dumps({answer!r}))\n"
    )
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(script)],
        "env": [{"name": "GREETING", "value": "hello"}],
    }


def test_an_exec_plugin_authenticates_and_runs_again_once_its_credential_expires(
    control_plane: Any, tmp_path: Path
) -> None:
    plugin = exec_plugin(tmp_path, control_plane.admin_token, expires="2000-01-01T00:00:00Z")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, {"exec": plugin})

    assert can_list_namespaces(kubeconfig)
    # Loaded once, then run again for each request, since its credential has long expired.
    assert (tmp_path / "runs").read_text().splitlines() == ["hello", "hello"]


def test_an_exec_credential_without_expiry_is_kept(control_plane: Any, tmp_path: Path) -> None:
    plugin = exec_plugin(tmp_path, control_plane.admin_token, expires=None)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, {"exec": plugin})
    api = KubeApi(load_configuration(str(kubeconfig)), qps=0)
    try:
        for _ in range(3):
            api.list(NAMESPACES, limit=1)
    finally:
        api.close()

    assert (tmp_path / "runs").read_text().splitlines() == ["hello"]


def test_kubeconfig_files_listed_in_the_environment_are_merged(
    control_plane: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    first.write_text(
        yaml.safe_dump(
            {
                "current-context": "x",
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": control_plane.admin_token}}],
            }
        )
    )
    second = write_kubeconfig(tmp_path / "second", control_plane, {"token": "shadowed"})
    missing = tmp_path / "missing"
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, (first, missing, second))))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    configuration = load_configuration()

    assert configuration.host == control_plane.api_url
    assert configuration.authorization() == f"Bearer {control_plane.admin_token}"


def test_impersonation_in_the_kubeconfig_reaches_the_server(
    control_plane: Any, tmp_path: Path
) -> None:
    # client-go v0.35.4 transport/round_trippers.go:247-265 sends as/as-uid/as-groups/
    # as-user-extra as Impersonate-User/-Uid/-Group (one header per group)/-Extra-<key> (the key
    # escaped by headerKeyEscape, :697-710) on every request.
    user = {
        "token": control_plane.admin_token,
        "as": "jane",
        "as-uid": "1234",
        "as-groups": ["team-a", "équipe"],
        "as-user-extra": {"acme.com/project": ["x", "y"], "reason": ["audit"]},
    }
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, user)
    api = KubeApi(load_configuration(str(kubeconfig)), qps=0)
    try:
        review = api.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    finally:
        api.close()

    seen = review["status"]["userInfo"]
    assert (seen["username"], seen["uid"]) == ("jane", "1234")
    assert seen["groups"] == ["team-a", "équipe", "system:authenticated"]
    assert seen["extra"] == {"acme.com/project": ["x", "y"], "reason": ["audit"]}


def test_an_impersonated_user_without_rights_is_refused_what_the_admin_may_do(
    control_plane: Any, tmp_path: Path
) -> None:
    token = control_plane.admin_token
    admin = KubeApi(load_configuration(str(
        write_kubeconfig(tmp_path / "admin", control_plane, {"token": token})
    )), qps=0)  # fmt: skip
    nobody = KubeApi(load_configuration(str(
        write_kubeconfig(tmp_path / "nobody", control_plane, {"token": token, "as": "nobody"})
    )), qps=0)  # fmt: skip
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "impersonated"}}
    try:
        with pytest.raises(ApiError) as refused:
            nobody.create(CONFIGMAPS, config_map, "default")
        assert refused.value.status == 403
        assert 'User "nobody" cannot create' in refused.value.message

        admin.create(CONFIGMAPS, config_map, "default")
        admin.delete(CONFIGMAPS, "impersonated", "default")
    finally:
        admin.close()
        nobody.close()


def test_in_cluster_settings_come_from_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("not checked here")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")

    configuration = load_in_cluster(tmp_path)

    assert configuration.host == "https://[fd00::1]:443"
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert configuration.authorization() == "Bearer sa-token"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeconfigError, match="not in a cluster"):
        load_in_cluster(tmp_path)


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"auth-provider": {"name": "oidc"}}, "auth-provider 'oidc' is not supported"),
        ({"client-key-data": "***not base64***"}, "client-key-data is not base64"),
        ({"exec": {"command": "/nonexistent/plugin"}}, "exec plugin /nonexistent/plugin"),
    ],
)
def test_unusable_credentials_are_one_clear_line(
    control_plane: Any, tmp_path: Path, user: dict[str, Any], message: str
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, user)

    with pytest.raises(KubeconfigError) as refused:
        load_configuration(str(kubeconfig))

    assert str(refused.value).startswith(f"cannot load kubeconfig {kubeconfig}: ")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_answer_of_an_exec_plugin_is_checked(control_plane: Any, tmp_path: Path) -> None:
    plugin = exec_plugin(tmp_path, "t", expires=None)
    plugin["apiVersion"] = "client.authentication.k8s.io/v1beta1"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, {"exec": plugin})

    with pytest.raises(KubeconfigError, match=r"answered client\.authentication\.k8s\.io/v1, not"):
        load_configuration(str(kubeconfig))
