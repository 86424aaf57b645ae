"""The guard on an emulator's settings changed through ``PUT /_polyccm/settings``, shared by the
DigitalOcean and Equinix Metal emulators: what a test or a developer may set, and the one-line
refusal naming the field otherwise (the emulator then answers 400 with it)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from polyccm_testing.emulation.settings import EmulatorSettings


@dataclass(frozen=True)
class Tunables(EmulatorSettings):
    delay: float = 0.0
    budget: int = 10
    token: str | None = None
    strict: bool = False
    zones: tuple[str, ...] = ("a",)


def test_each_kind_of_field_takes_its_kind_of_value() -> None:
    changed = Tunables().updated({"delay": 2, "budget": 3, "token": "t", "strict": True})

    assert changed == Tunables(delay=2, budget=3, token="t", strict=True)
    assert Tunables(token="t").updated({"token": None}).token is None
    assert changed.as_dict()["budget"] == 3


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"delay": -1}, "delay must be a number of seconds >= 0"),
        ({"delay": True}, "delay must be a number of seconds >= 0"),
        ({"delay": "1"}, "delay must be a number of seconds >= 0"),
        ({"budget": 0}, "budget must be a positive integer"),
        ({"budget": 1.5}, "budget must be a positive integer"),
        ({"token": 5}, "token must be a string or null"),
        ({"strict": "yes"}, "strict must be true or false"),
        ({"zones": ["b"]}, "zones cannot be changed at run time"),
        ({"dealy": 1}, "unknown setting 'dealy'; known: ['budget', 'delay', 'strict', 'token'"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_naming_the_field(
    changes: dict[str, object], refusal: str
) -> None:
    with pytest.raises(ValueError) as raised:
        Tunables().updated({"budget": 5, **changes})

    assert str(raised.value).startswith(refusal)
