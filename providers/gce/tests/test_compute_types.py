"""google-cloud-compute's message classes, only those the provider's clients reach: the SDK's
``types.compute`` defines ~2,100 of them in one module, ~1 s of CPU and ~40 MiB of peak RSS
beyond what the 14 clients need (issue 33). The module is built from the SDK's own source with
those ~390 classes; a source laid out otherwise loads whole, as before."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from polyccm_gce import compute_types
from polyccm_gce.api import OPERATION_CLIENTS
from polyccm_gce.compute_types import CLIENTS, LayoutError, pruned_source

SOURCE = Path(compute_types.__file__).parent

#: Loads the 14 clients as the provider does, builds and serialises an instance, and says what
#: it cost and which message classes exist.
SCRIPT = """
import json, re, sys, time
start = time.process_time()
from polyccm_gce import sdk
from polyccm_gce.compute_types import CLIENTS
for name in CLIENTS:
    getattr(sdk.compute_v1, name)
c = sdk.compute_v1
instance = c.Instance(name="a", network_interfaces=[c.NetworkInterface(network_i_p="10.0.0.2")])
again = c.Instance.from_json(c.Instance.to_json(instance))
used = json.loads(sys.argv[1])
status = open("/proc/self/status").read()
types = sys.modules["google.cloud.compute_v1.types.compute"]
print(json.dumps({
    "cpu": time.process_time() - start,
    "peak_mib": int(re.search(r"VmHWM:\\s+(\\d+)", status).group(1)) / 1024,
    "classes": len(types.__protobuf__.manifest),
    "round_trip": again.network_interfaces[0].network_i_p,
    "used_missing": [name for name in used if not hasattr(c, name)],
    "other_message": hasattr(c, "AcceleratorType"),
}))
"""


def _used_by_the_provider() -> list[str]:
    """Every ``compute_v1.X`` message the provider's modules name."""
    names: set[str] = set()
    for path in SOURCE.glob("*.py"):
        names |= set(re.findall(r"\bcompute_v1\.([A-Z]\w+)", path.read_text()))
    return sorted(name for name in names if not name.endswith("Client"))


def test_the_clients_load_with_only_the_messages_they_reach() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(_used_by_the_provider())],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )
    found = json.loads(out.stdout)
    # All ~2,100 before (compute_v1 1.57.0: 2,087); ~390 are the 14 clients' own.
    assert 200 < found["classes"] < 600, found["classes"]
    # Measured here: 109 MiB with every class, 71 MiB with the clients' (the 14 clients, their
    # transports, grpc and google-auth included).
    assert found["peak_mib"] < 90, found["peak_mib"]
    assert found["round_trip"] == "10.0.0.2"
    assert found["used_missing"] == []  # every message the provider names is there
    assert found["other_message"] is False  # another service's messages are not built


def test_every_client_the_provider_builds_is_one_whose_messages_are_built() -> None:
    named: set[str] = set(OPERATION_CLIENTS.values())
    for path in SOURCE.glob("*.py"):
        named |= set(re.findall(r"\bcompute_v1\.(\w+Client)\b", path.read_text()))
    assert named == set(CLIENTS)


SMALL = b"""import proto

__protobuf__ = proto.module(
    package="google.cloud.compute.v1",
    manifest={
        "Held",
        "Instance",
        "Other",
    },
)


class Held(proto.Message):
    name: str = proto.Field(proto.STRING, number=1)


class Instance(
    proto.Message
):
    held: "Held" = proto.Field(proto.MESSAGE, number=1, message="Held")


class Other(proto.Message):
    name: str = proto.Field(proto.STRING, number=1)


__all__ = tuple(sorted(__protobuf__.manifest))
"""


def test_a_message_brings_the_messages_its_fields_hold_and_no_other() -> None:
    pieces = pruned_source(SMALL, ["Instance"])
    text = "".join(pieces)
    assert '"Held",' in text and '"Instance",' in text and '"Other",' not in text
    assert "class Held(" in text and "class Instance(" in text and "class Other(" not in text
    assert pieces[-1].startswith("\n__all__ = ")


@pytest.mark.parametrize(
    ("source", "wanted"),
    [
        (SMALL.replace(b"class Other(", b"Alias = Held\n\n\nclass Other("), ["Instance"]),
        (SMALL.replace(b'        "Other",\n', b""), ["Instance"]),
        (SMALL, ["Missing"]),
        (SMALL.replace(b"__protobuf__ = proto.module(", b"MODULE = proto.module("), ["Instance"]),
    ],
    ids=[
        "a statement between classes",
        "manifest and classes differ",
        "unknown message",
        "no manifest",
    ],
)
def test_a_source_laid_out_otherwise_is_refused_so_the_whole_module_loads(
    source: bytes, wanted: list[str]
) -> None:
    with pytest.raises(LayoutError):
        pruned_source(source, wanted)


FAILING = """
import sys
from polyccm_gce import compute_types

cut = compute_types.pruned_source
compute_types.pruned_source = lambda source, wanted: [*cut(source, wanted), "def (:\\n"]
from polyccm_gce import sdk

client = sdk.compute_v1.RoutesClient.__name__
types = sys.modules["google.cloud.compute_v1.types.compute"]
print(client, len(types.__protobuf__.manifest) > 2000, sdk.compute_v1.AcceleratorType.__name__)
"""


def test_a_cut_module_that_would_not_compile_gives_way_to_the_whole_one() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FAILING], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["RoutesClient", "True", "AcceleratorType"]
