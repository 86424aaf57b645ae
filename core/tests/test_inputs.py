""":mod:`polyccm.inputs`, the one reader of user files: every way a file or a document can be
wrong is one :class:`ConfigError` line naming the file and the cause, and a long value echoed in
a message is cut. (The commands that use it are tested with it: ``test_ops_check_service``.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from polyccm import inputs, logredact
from polyccm.errors import ConfigError


def refusal(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as raised:
        call(*args, **kwargs)  # type: ignore[operator]
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_a_five_megabyte_value_is_echoed_by_its_start_and_size() -> None:
    value = "x" * 5_000_000

    assert inputs.cut(value) == "x" * 60 + "… (5000000 bytes)"
    assert inputs.quoted(value) == repr("x" * 60) + "… (5000000 bytes)"
    assert inputs.cut("é" * 61) == "é" * 60 + "… (122 bytes)"
    assert inputs.cut("short") == "short"
    assert inputs.quoted("short") == "'short'"


def test_a_secret_in_a_value_is_masked_before_the_value_is_cut() -> None:
    # A secret cut in two is no longer the secret the redaction of every message looks for:
    # a DigitalOcean token pasted into DEFAULT_LB_TYPE was echoed by its first 52 characters.
    token = "dop_v1_" + "ab12" * 16
    logredact.add_secret(token)
    try:
        for echo in (inputs.cut(f"x{token}"), inputs.quoted(f"x{token}")):
            assert "ab12ab12" not in echo and "***" in echo, echo
    finally:
        logredact.forget_secrets()


def test_control_characters_never_break_the_line() -> None:
    assert inputs.cut("a\nb\r\x1b[31m\u2028") == "a\\nb\\r\\x1b[31m\\u2028"
    assert inputs.quoted("a\nb") == "'a\\nb'"


def test_files_that_cannot_be_read_name_the_file_and_the_cause(tmp_path: Path) -> None:
    binary = tmp_path / "random.conf"
    binary.write_bytes(b"ok\n\x8c\x01\xff")
    large = tmp_path / "large.conf"
    large.write_bytes(b"x" * 2049)
    path = str(tmp_path)

    assert refusal(inputs.read_text, binary, what="cloud config") == (
        f"{binary}: cloud config is not UTF-8 text (byte 0x8c at offset 3)"
    )
    assert refusal(inputs.read_text, large, what="token file", limit=2048) == (
        f"{large}: token file is larger than 2 KiB, the most polyccm reads"
    )
    assert refusal(inputs.read_text, tmp_path / "none") == (
        f"{path}/none: cannot read file: No such file or directory"
    )
    assert refusal(inputs.read_text, tmp_path) == f"{path}: cannot read file: Is a directory"
    # A device is read up to the bound, never to its end.
    assert refusal(inputs.read_text, "/dev/zero", limit=1024) == (
        "/dev/zero: file is larger than 1 KiB, the most polyccm reads"
    )


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "cloud.conf"
    path.write_bytes(b"\xef\xbb\xbf[Global]\n")

    assert inputs.read_text(path) == "[Global]\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: " + "[" * 100_000 + "]" * 100_000, "s:1: nested deeper than 100 levels"),
        ("a: " + "[" * 101 + "]" * 101, "s: nested deeper than 100 levels"),
        (
            "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200)),
            "s: nested deeper than 100 levels",
        ),
        ("a: 1\nb: 2\na: 3\n", "s:3: duplicate key 'a'"),
        ("? [a]\n: b\n", "s:1: found a key that is not a string"),
        ("kind: [", "s:1: did not find expected node content"),
        ("port: " + "8" * 5000, "s: a number has more than 4300 digits"),
    ],
    ids=["deep-flow", "deep-101", "deep-block", "key-twice", "list-key", "unclosed", "digits"],
)
def test_yaml_that_cannot_be_a_document_is_one_line(text: str, message: str) -> None:
    assert refusal(inputs.load_yaml_documents, text, "s") == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "s: nested deeper than 100 levels"),
        ('{"a": 1, "a": 2}', "s: duplicate key 'a'"),
        ('{"a": Infinity}', "s: not JSON: Infinity"),
        ('{"a": 1} {"b": 2}', "s: not JSON: more than one value"),
        ("", "s: not JSON: nothing"),
        ('{"a": ', "s:1: not JSON: Expecting value"),
        ('{"localASN": ' + "6" * 5000 + "}", "s: a number has more than 4300 digits"),
    ],
    ids=["deep", "key-twice", "infinity", "two-values", "empty", "unclosed", "digits"],
)
def test_json_that_cannot_be_a_value_is_one_line(text: str, message: str) -> None:
    assert refusal(inputs.load_json, text, "s") == message


def test_yaml_reads_as_json_values() -> None:
    text = "date: 2024-01-02\n1: one\ntrue: yes\nbase: &b {x: 1, y: 2}\nmerged: {<<: *b, y: 3}\n"

    assert inputs.load_yaml_documents(text, "s") == [
        {
            "date": "2024-01-02",
            "1": "one",
            "true": True,
            "base": {"x": 1, "y": 2},
            "merged": {"x": 1, "y": 3},
        }
    ]


def test_manifests_are_json_when_they_start_with_a_brace_as_kubectl_reads_them() -> None:
    assert inputs.load_documents('{"a": 1}\n{"b": [2]}\n', "s") == [{"a": 1}, {"b": [2]}]
    assert inputs.load_documents("a: 1\n---\n---\nb: 2\n", "s") == [{"a": 1}, {"b": 2}]
    assert refusal(inputs.load_documents, "{a: 1}", "s") == (
        "s:1: not JSON: Expecting property name enclosed in double quotes"
    )
