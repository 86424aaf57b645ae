"""``--logging-format=text|json`` as Kubernetes components accept it: klog's header in text,
component-base's JSON lines in json; an unknown format is one line and exit 2; secrets are
masked in both."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN

# klog v2 klog.go formatHeader: "Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg", the thread id
# (the pid) padded to 7 columns.
KLOG_HEADER = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} [ \d]{7} [\w.<>-]+:\d+\] ")
SECRET = "s3cr3t-Value-9f8e7d6c"


def _kubeconfig(tmp_path: Path) -> Path:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        f"users: [{{name: u, user: {{token: {SECRET}}}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return kubeconfig


def _first_lines(args: list[str], until: str) -> list[str]:
    """The stderr lines of the fake-cloud polyccm with ``args`` up to the one holding
    ``until`` (within 60 s); then it is stopped."""
    process = subprocess.Popen(
        [*FAKE_MAIN, "--configure-cloud-routes=false", "--secure-port=0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "POLYCCM_TEST_API_TOKEN": SECRET},
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if until in line:
                break
    finally:
        process.terminate()
        process.communicate(timeout=30)
    return lines


WARNING = "--controllers selects no controller"


def test_text_is_klogs_header(tmp_path: Path) -> None:
    lines = _first_lines([f"--kubeconfig={_kubeconfig(tmp_path)}", "--controllers="], WARNING)
    warning = next(x for x in lines if WARNING in x)
    assert KLOG_HEADER.match(warning), warning
    assert warning.startswith("W")
    assert f" {os.getpid():7d} " not in warning  # the polyccm process's pid, not ours
    assert re.search(r" cli\.py:\d+\] --controllers", warning), warning


def test_json_lines_have_component_bases_fields(tmp_path: Path) -> None:
    lines = _first_lines(
        [f"--kubeconfig={_kubeconfig(tmp_path)}", "--controllers=", "--logging-format=json"],
        WARNING,
    )
    records = [json.loads(line) for line in lines if line.startswith("{")]
    warning = next(r for r in records if WARNING in r["msg"])
    # component-base logs/json/json.go NewJSONLogger (349fbe06, lines 66-73): ts (epoch
    # milliseconds, a float), caller, msg; zapr adds v for info lines.
    assert list(warning)[:3] == ["ts", "caller", "msg"]
    assert isinstance(warning["ts"], float) and warning["ts"] > 1.6e12
    assert re.fullmatch(r"cli\.py:\d+", warning["caller"])
    assert warning["v"] == 0


@pytest.mark.parametrize("logging_format", ["text", "json"])
def test_secrets_stay_masked_in_either_format(logging_format: str) -> None:
    script = (
        "import logging\n"
        "from polyccm.app.commandline import configure_logging\n"
        f"configure_logging(2, logging_format={logging_format!r})\n"
        "log = logging.getLogger('polyccm')\n"
        f"log.warning('the token is %s', {SECRET!r})\n"
        f"log.info('sent Authorization: Bearer abcdefghijklmnop')\n"
        "try:\n"
        f"    raise RuntimeError('password={SECRET}')\n"
        "except RuntimeError:\n"
        "    log.exception('failed')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "POLYCCM_TEST_API_TOKEN": SECRET},
    )
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stderr
    assert "abcdefghijklmnop" not in result.stderr
    if logging_format == "json":
        records = [json.loads(line) for line in result.stderr.splitlines() if line]
        assert len(records) == 3, result.stderr  # a traceback stays inside its line
        assert records[0]["msg"] == "the token is ***"
        assert "err" in records[2] and "v" not in records[2]
    else:
        assert KLOG_HEADER.match(result.stderr.splitlines()[0]), result.stderr
        assert "the token is ***" in result.stderr


def test_an_unknown_format_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "polyccm.cli", "--provider=aws", "--logging-format=xml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--logging-format 'xml': unsupported log format (text or json)" in result.stderr
