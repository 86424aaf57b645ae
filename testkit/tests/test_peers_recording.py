"""The switch tests' recorder and goldens: what a CCM asked of its cloud is what the recorder
keeps (and never its token), a CCM that dials the real cloud's name is served only through the
interception CA and only for that name, and a golden replays against an emulator that assigns
ids of its own."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from polyccm_testing.peers.goldens import (
    Peer,
    Replayer,
    ReplayRefused,
    Step,
    comparable,
    load_steps,
    save_step,
    substitute,
)
from polyccm_testing.peers.recording import Exchange, Recorder, writes


class TinyCloud:
    """A cloud of load balancers whose ids count from ``first_id``; it remembers the
    Authorization header of the last request."""

    def __init__(self, first_id: int) -> None:
        self.next_id = first_id
        self.balancers: dict[str, dict[str, Any]] = {}
        self.last_authorization: str | None = None
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self, status: int, body: Any) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                cloud.last_authorization = self.headers.get("Authorization")
                name = self.path.rsplit("/", 1)[-1]
                if self.path.startswith("/v2/lbs?"):
                    self.answer(200, {"lbs": list(cloud.balancers.values()), "q": self.path})
                elif name in cloud.balancers:
                    self.answer(200, {"lb": cloud.balancers[name]})
                else:
                    self.answer(404, {"message": "not found"})

            def do_POST(self) -> None:
                cloud.last_authorization = self.headers.get("Authorization")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                lb_id = f"lb-{cloud.next_id:08d}"
                cloud.next_id += 1
                cloud.balancers[lb_id] = {"id": lb_id, "name": body["name"], "port": 80}
                self.answer(201, {"lb": cloud.balancers[lb_id]})

            def do_DELETE(self) -> None:
                name = self.path.rsplit("/", 1)[-1]
                found = cloud.balancers.pop(name, None)
                self.answer(204 if found else 404, None)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cloud() -> Iterator[TinyCloud]:
    running = TinyCloud(first_id=1000)
    yield running
    running.close()


def call(url: str, method: str, body: Any = None, token: str = "t0ps3cret") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw else None


def test_the_recorder_keeps_each_exchange_and_never_the_token(cloud: TinyCloud) -> None:
    with Recorder(cloud.url) as recorder:
        status, created = call(f"{recorder.url}/v2/lbs", "POST", {"name": "web"})
        assert status == 201
        call(f"{recorder.url}/v2/lbs?tag=k8s%3Aabc&page=1", "GET")
        call(f"{recorder.url}/v2/lbs/missing", "GET")
        first = recorder.take()
        call(f"{recorder.url}/v2/lbs/{created['lb']['id']}", "DELETE")
        second = recorder.take()

    assert [str(exchange) for exchange in first] == [
        "POST /v2/lbs -> 201",
        "GET /v2/lbs?tag=k8s%3Aabc&page=1 -> 200",
        "GET /v2/lbs/missing -> 404",
    ]
    assert first[0].request == {"name": "web"}
    assert first[0].response == {"lb": {"id": "lb-00001000", "name": "web", "port": 80}}
    assert [str(exchange) for exchange in second] == ["DELETE /v2/lbs/lb-00001000 -> 204"]
    assert [str(e) for e in writes(first + second)] == [
        "POST /v2/lbs -> 201",
        "DELETE /v2/lbs/lb-00001000 -> 204",
    ]
    # The cloud got the token; the recording (which becomes a committed golden) does not hold it.
    assert cloud.last_authorization == "Bearer t0ps3cret"
    assert "t0ps3cret" not in json.dumps([e.as_json() for e in first + second])


def test_a_ccm_that_dials_the_real_cloud_name_is_served_through_the_interception_ca(
    cloud: TinyCloud,
) -> None:
    with Recorder(cloud.url, intercept=("api.equinix.com",)) as recorder:
        assert recorder.client_ca_file is not None
        port = int(recorder.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(recorder.client_ca_file))
        tunnel = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        tunnel.set_tunnel("api.equinix.com", 443)
        tunnel.request("POST", "/metal/v1/ips", body=json.dumps({"name": "eip"}))
        answer = tunnel.getresponse()
        assert answer.status == 201
        assert json.loads(answer.read())["lb"]["name"] == "eip"
        tunnel.close()

        # Any other name is refused: nothing is forwarded off the machine.
        elsewhere = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        elsewhere.set_tunnel("example.com", 443)
        with pytest.raises(OSError, match="403"):
            elsewhere.request("GET", "/")
        # A client that does not trust the interception CA does not get through either.
        stranger = http.client.HTTPSConnection(
            "127.0.0.1", port, context=ssl.create_default_context(), timeout=10
        )
        stranger.set_tunnel("api.equinix.com", 443)
        with pytest.raises(ssl.SSLCertVerificationError):
            stranger.request("GET", "/metal/v1/ips")
        assert [str(e) for e in recorder.take()] == ["POST /metal/v1/ips -> 201"]


def test_a_relay_that_keeps_nothing_still_serves_through_the_interception_ca(
    cloud: TinyCloud,
) -> None:
    # The benchmark runs upstream's Equinix Metal CCM through it for thousands of calls.
    with Recorder(cloud.url, intercept=("api.equinix.com",), keep=False) as relay:
        assert relay.client_ca_file is not None
        port = int(relay.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(relay.client_ca_file))
        tunnel = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        tunnel.set_tunnel("api.equinix.com", 443)
        for name in ("a", "b"):
            tunnel.request("POST", "/metal/v1/ips", body=json.dumps({"name": name}))
            answer = tunnel.getresponse()
            assert answer.status == 201 and json.loads(answer.read())["lb"]["name"] == name
        tunnel.close()
        assert relay.exchanges() == [] and relay.take() == []
    assert sorted(b["name"] for b in cloud.balancers.values()) == ["a", "b"]


def test_the_recorder_forwards_to_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        Recorder("https://api.digitalocean.com")


def test_a_golden_replays_on_a_cloud_that_numbers_its_ids_differently(
    tmp_path: Path, cloud: TinyCloud
) -> None:
    # Record against one cloud ...
    with Recorder(cloud.url) as recorder:
        _, made = call(f"{recorder.url}/v2/lbs", "POST", {"name": "svc-0f3c9a11"})
        call(f"{recorder.url}/v2/lbs/{made['lb']['id']}", "GET")
        call(f"{recorder.url}/v2/lbs/{made['lb']['id']}", "DELETE")
        step = Step("creates", tuple(recorder.take()), cloud={"count": 0}, note="made and gone")
    peer = Peer("tiny-ccm", "v1.2.3", "fetched tree at v1.2.3")
    save_step(tmp_path, 0, step, peer)
    golden = load_steps(tmp_path)
    assert golden.peer == peer
    assert golden.step("creates") == step

    # ... and replay against another whose ids start elsewhere, with the Service UID bound.
    other = TinyCloud(first_id=555000)
    try:
        replayer = Replayer(other.url, bindings={"svc-0f3c9a11": "svc-77aa0021"})
        actual = replayer.replay(golden.step("creates").exchanges)
        assert [str(e) for e in actual] == [
            "POST /v2/lbs -> 201",
            "GET /v2/lbs/lb-00555000 -> 200",
            "DELETE /v2/lbs/lb-00555000 -> 204",
        ]
        assert actual[0].request == {"name": "svc-77aa0021"}
        assert other.balancers == {}

        # An emulator that answers differently from the recording is named, with both answers.
        refused = r"DELETE /v2/lbs/lb-00555000: recorded 204, now 404"
        with pytest.raises(ReplayRefused, match=refused):
            replayer.send(golden.step("creates").exchanges[2])
    finally:
        other.close()


def test_steps_from_different_peers_do_not_make_one_golden(tmp_path: Path) -> None:
    save_step(tmp_path, 0, Step("creates", ()), Peer("ccm", "v1", "a"))
    save_step(tmp_path, 1, Step("edits", ()), Peer("ccm", "v2", "a"))
    with pytest.raises(ValueError, match="different peers"):
        load_steps(tmp_path)


def test_substitution_replaces_whole_tokens_only() -> None:
    bindings = {"a1b2c3d4": "a9f8e7d6", "123456": "654321"}
    assert substitute(
        {
            "url": "/targetPools/a1b2c3d4",
            "firewall": "k8s-fw-a1b2c3d4",
            "longer": "a1b2c3d4e5",
            "droplet": 123456,
            "provider": "digitalocean://123456",
            "port": 80,
        },
        bindings,
    ) == {
        "url": "/targetPools/a9f8e7d6",
        "firewall": "k8s-fw-a9f8e7d6",
        "longer": "a1b2c3d4e5",
        "droplet": 654321,
        "provider": "digitalocean://654321",
        "port": 80,
    }


def test_comparable_states_ignore_volatile_fields_and_list_order() -> None:
    before = {"lbs": [{"id": "1", "name": "b", "created": "t1"}, {"id": "2", "name": "a"}]}
    after = {"lbs": [{"id": "9", "name": "a"}, {"id": "8", "name": "b", "created": "t2"}]}
    assert comparable(before, {"id", "created"}) == comparable(after, {"id", "created"})
    assert comparable(before, {"created"}) != comparable(after, {"created"})


def test_exchanges_survive_a_round_trip() -> None:
    exchange = Exchange("PUT", "/v2/x?y=1", {"a": [1, 2]}, 200, "plain text")
    assert Exchange.from_json(exchange.as_json()) == exchange
    assert exchange.is_write
    assert not Exchange("GET", "/", None, 200, None).is_write


def test_lists_a_cloud_sorts_by_name_are_paired_by_name() -> None:
    # Names hold UIDs, so a replay's list comes in another order than the recording's.
    recorded = {
        "items": [{"name": "a-111111", "ip": "10.0.0.11"}, {"name": "b-222222", "ip": "10.0.0.22"}]
    }
    actual = {
        "items": [{"name": "a-999999", "ip": "10.0.0.99"}, {"name": "b-222222", "ip": "10.0.0.22"}]
    }
    actual["items"].reverse()
    by_position = Replayer("http://127.0.0.1:1", bindings={"111111": "999999"})
    by_position.learn(recorded, actual)
    assert by_position.bindings["10.0.0.11"] == "10.0.0.22"  # the wrong pair
    by_name = Replayer("http://127.0.0.1:1", bindings={"111111": "999999"}, pair_lists_by="name")
    by_name.learn(recorded, actual)
    assert by_name.bindings == {
        "111111": "999999",
        "a-111111": "a-999999",
        "10.0.0.11": "10.0.0.99",
    }


def test_words_and_empty_values_are_never_bound() -> None:
    # A replay faster than the recording sees a balancer "new" where the recording saw it
    # "active": binding the word would rewrite every later state that says "active".
    replayer = Replayer("http://127.0.0.1:1")
    replayer.learn(
        {"status": "active", "id": "lb-0001234", "ip": "10.1.2.3", "note": "lb-0009"},
        {"status": "new", "id": "lb-0005678", "ip": "", "note": "lb-0010"},
    )
    assert replayer.bindings == {"lb-0001234": "lb-0005678", "lb-0009": "lb-0010"}
