"""``--feature-gates`` as upstream's cloud-controller-manager v1.35 parses it: Name=bool pairs
against upstream's known gates, refused as component-base's featureGate refuses them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from polyccm.app import commandline
from polyccm.app.featuregates import FeatureGates
from polyccm.plugins import plugin_manager


def gates(*values: str) -> FeatureGates:
    argv = ["--provider=gce", *(f"--feature-gates={value}" for value in values)]
    options, _ = commandline.parse(argv, plugin_manager())
    return options.feature_gates


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "polyccm.cli", "--provider=gce", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_pairs_are_stored_in_the_options_and_resolve_with_the_defaults() -> None:
    parsed = gates("CloudControllerManagerWebhook=true, ContextualLogging = false")
    assert parsed.explicit == (
        ("CloudControllerManagerWebhook", True),
        ("ContextualLogging", False),
    )
    assert parsed.enabled("CloudControllerManagerWebhook") is True
    assert parsed.enabled("ContextualLogging") is False
    # Unset: the v1.35 default (beta, on).
    assert parsed.enabled("AllowParsingUserUIDFromCertAuth") is True
    assert gates().explicit == ()


def test_a_repeated_flag_adds_to_the_pairs_before_it() -> None:
    # component-base v0.35.4 featuregate/feature_gate.go:454-460: SetFromMap merges each
    # occurrence into enabledRaw, later values overriding.
    parsed = gates("ContextualLogging=false,WatchList=false", "ContextualLogging=true")
    assert dict(parsed.explicit) == {"ContextualLogging": True, "WatchList": False}


def test_all_alpha_and_all_beta_set_the_gates_not_named() -> None:
    # feature_gate.go:270-296 (setUnsetAlphaGates / setUnsetBetaGates).
    parsed = gates("AllAlpha=true,AllBeta=false,LoggingAlphaOptions=false")
    assert parsed.enabled("CloudControllerManagerWebhook") is True  # alpha, not named
    assert parsed.enabled("LoggingAlphaOptions") is False  # alpha, named
    assert parsed.enabled("ContextualLogging") is False  # beta, default on
    assert parsed.enabled("APIServerTracing") is True  # GA: untouched


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # feature_gate.go:384-388: the first unknown gate ends the parse.
        ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
        # feature_gate.go:391-393: a gate locked to its default (GA APIServerTracing).
        (
            "APIServerTracing=false",
            "cannot set feature gate APIServerTracing to false, feature is locked to true",
        ),
        # feature_gate.go:346-355: Set's own checks.
        ("ContextualLogging", "missing bool value for ContextualLogging"),
        ("ContextualLogging=yes", "invalid value of ContextualLogging=yes"),
    ],
)
def test_a_gate_upstream_refuses_exits_2_with_one_line(value: str, message: str) -> None:
    result = run_cli(f"--feature-gates={value}")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("polyccm: error: argument --feature-gates:")
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_locked_gate_set_to_its_default_is_accepted() -> None:
    assert gates("APIServerTracing=true").enabled("APIServerTracing") is True


def test_setting_a_ga_or_deprecated_gate_is_warned_about() -> None:
    # feature_gate.go:407-411: allowed, with a warning that it will be removed.
    parsed = gates("APIServerTracing=true,KMSv1=false,ContextualLogging=true")
    assert parsed.warnings() == [
        "setting GA feature gate APIServerTracing=true; it will be removed in a future release",
        "setting deprecated feature gate KMSv1=false; it will be removed in a future release",
    ]


def test_gates_polyccm_reads_change_what_it_accepts() -> None:
    # component-base v0.35.4 logs/api/v1/options.go:156-166 (json needs its format's gate,
    # LoggingBetaOptions) and 200-219 (split streams and buffers need LoggingAlphaOptions).
    gates("LoggingBetaOptions=true")  # the default
    commandline.parse(["--provider=gce", "--logging-format=json"], plugin_manager())
    with pytest.raises(commandline.UsageError, match="LoggingBetaOptions"):
        commandline.parse(
            ["--provider=gce", "--logging-format=json", "--feature-gates=LoggingBetaOptions=false"],
            plugin_manager(),
        )
    with pytest.raises(commandline.UsageError, match="LoggingAlphaOptions"):
        commandline.parse(["--provider=gce", "--log-text-split-stream"], plugin_manager())
    commandline.parse(
        ["--provider=gce", "--log-text-split-stream", "--feature-gates=LoggingAlphaOptions=true"],
        plugin_manager(),
    )
