"""The health server answers probes and scrapes over real HTTPS."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest
from polyccm import metrics
from polyccm.health import HealthServer
from polyccm.serving import certs
from polyccm_testing.secureport import secure_get


def _get(server: HealthServer, path: str) -> tuple[int, str, str]:
    reply = secure_get(server.port, path)
    return reply.status, reply.content_type, reply.body


@pytest.fixture(scope="module")
def tls() -> ssl.SSLContext:
    return certs.server_context(
        cert_file=None, key_file=None, cert_dir="", bind_address="127.0.0.1"
    )


@pytest.fixture
def state() -> dict[str, bool]:
    return {"alive": True, "ready": True}


@pytest.fixture
def server(state: dict[str, bool], tls: ssl.SSLContext) -> Iterator[HealthServer]:
    health = HealthServer(
        "127.0.0.1",
        0,
        tls=tls,
        checks={"leader-election": lambda: state["alive"]},
        ready_checks={"informers-synced": lambda: state["ready"]},
    )
    health.start()
    yield health
    health.stop()


def test_port_zero_binds_a_free_port(server: HealthServer) -> None:
    assert server.port > 0


def test_healthz_and_livez_answer_ok_while_checks_pass(server: HealthServer) -> None:
    assert _get(server, "/healthz")[::2] == (200, "ok")
    assert _get(server, "/livez")[::2] == (200, "ok")


def test_healthz_fails_with_the_failing_check_named(
    server: HealthServer, state: dict[str, bool]
) -> None:
    state["alive"] = False
    status, _, body = _get(server, "/healthz")
    assert status == 500
    assert "[-]leader-election failed" in body
    assert "[+]ping ok" in body
    assert body.endswith("healthz check failed\n")


def test_readyz_includes_liveness_and_readiness_checks(
    server: HealthServer, state: dict[str, bool]
) -> None:
    assert _get(server, "/readyz")[::2] == (200, "ok")
    state["ready"] = False
    status, _, body = _get(server, "/readyz")
    assert status == 500
    assert "[-]informers-synced failed" in body
    assert "[+]leader-election ok" in body
    # Readiness does not affect liveness: an unready process must not be restarted.
    assert _get(server, "/healthz")[0] == 200


def test_verbose_lists_every_check_on_success(server: HealthServer) -> None:
    status, _, body = _get(server, "/readyz?verbose")
    assert status == 200
    assert body.splitlines() == [
        "[+]ping ok",
        "[+]leader-election ok",
        "[+]informers-synced ok",
        "readyz check passed",
    ]


def test_a_single_check_has_its_own_path(server: HealthServer, state: dict[str, bool]) -> None:
    state["alive"] = False
    assert _get(server, "/healthz/ping")[0] == 200
    assert _get(server, "/healthz/leader-election")[0] == 500
    assert _get(server, "/healthz/nope")[0] == 404


def test_a_check_that_raises_counts_as_failing(tls: ssl.SSLContext) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    health = HealthServer("127.0.0.1", 0, tls=tls, checks={"broken": broken})
    health.start()
    try:
        status, _, body = _get(health, "/healthz")
    finally:
        health.stop()
    assert status == 500
    assert "[-]broken failed" in body


def test_metrics_serves_the_registry_in_prometheus_text_format(server: HealthServer) -> None:
    metrics.route_sync_total.inc()
    status, content_type, body = _get(server, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    for name in (
        "node_controller_cloud_provider_taint_removal_delay_seconds_bucket",
        "node_controller_initial_node_sync_delay_seconds_bucket",
        "service_controller_loadbalancer_sync_total",
        "service_controller_nodesync_error_total",
        "service_controller_nodesync_latency_seconds_bucket",
        "service_controller_update_loadbalancer_host_latency_seconds_bucket",
        "route_controller_route_sync_total",
    ):
        assert f"\n{name}" in body, name


def test_unknown_paths_are_404(server: HealthServer) -> None:
    assert _get(server, "/nothing")[0] == 404


def test_stop_frees_the_port(tls: ssl.SSLContext) -> None:
    health = HealthServer("127.0.0.1", 0, tls=tls)
    health.start()
    port = health.port
    health.stop()
    again = HealthServer("127.0.0.1", port, tls=tls)
    again.start()
    assert _get(again, "/healthz")[0] == 200
    again.stop()


def test_a_refused_request_gets_the_refusal_and_runs_no_check(tls: ssl.SSLContext) -> None:
    asked: list[tuple[str, str | None]] = []
    ran: list[str] = []

    def access(
        path: str, authorization: str | None, certificate: bytes | None
    ) -> tuple[int, str, bytes] | None:
        assert certificate is None, "no client certificate was asked for"
        asked.append((path, authorization))
        return None if path == "/healthz" else (403, "text/plain", b"no\n")

    health = HealthServer(
        "127.0.0.1", 0, tls=tls, checks={"x": lambda: ran.append("x") is None}, access=access
    )
    health.start()
    try:
        assert _get(health, "/healthz")[::2] == (200, "ok")
        assert _get(health, "/readyz?verbose") == (403, "text/plain", "no\n")
        assert secure_get(health.port, "/metrics", token="abc").status == 403
    finally:
        health.stop()
    assert ran == ["x"], "the refused /readyz ran no check"
    assert asked == [("/healthz", None), ("/readyz", None), ("/metrics", "Bearer abc")]


def test_plain_http_is_not_answered(server: HealthServer) -> None:
    import urllib.request

    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
    assert _get(server, "/healthz")[0] == 200, "a failed handshake leaves the server serving"
