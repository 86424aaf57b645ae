"""The one helper every provider's config reader warns through about what it does not read."""

from __future__ import annotations

import logging

import pytest
from polyccm.configkeys import warn_unknown_keys


def test_one_warning_line_per_unknown_key_naming_file_line_section_and_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    found = [("Region", 2), ("Regoin", 3), ("ZONE", 4), ("Colour", None)]

    with caplog.at_level(logging.WARNING):
        unknown = warn_unknown_keys(
            "/etc/cloud.conf", "[Global]", found, {"region", "zone"}, fold=str.lower
        )

    assert unknown == ["Regoin", "Colour"]
    assert caplog.messages == [
        "/etc/cloud.conf:3: unknown key 'Regoin' in [Global] is ignored",
        "/etc/cloud.conf: unknown key 'Colour' in [Global] is ignored",
    ]
    assert [record.levelno for record in caplog.records] == [logging.WARNING] * 2


def test_sections_and_upstream_keys_polyccm_leaves_out_are_told_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        warn_unknown_keys("gce.conf", "", [("[aws]", 7)], (), what="section")
        warn_unknown_keys("metal.json", "", [("eipTag", None)], {"apiKey"}, unused={"eipTag"})

    assert caplog.messages == [
        "gce.conf:7: unknown section [aws] is ignored, with its keys",
        "metal.json: key 'eipTag' is ignored: polyccm does not implement it",
    ]


def test_known_keys_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        assert warn_unknown_keys("f", "[s]", [("a", 1)], {"a"}) == []
    assert caplog.records == []
