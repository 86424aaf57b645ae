"""A loopback TCP proxy in front of the API server that a test can make go away, the two ways an
API server goes away: :meth:`TcpProxy.freeze` (connections stay open and nothing is answered,
as behind a dead network path: requests hang until their timeout) and :meth:`TcpProxy.cut`
(every connection closed and new ones refused, as a stopped API server).

:func:`proxied_kubeconfig` writes a kubeconfig that reaches an API server through one; the
server's certificate names the loopback address, so TLS is unchanged."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import yaml


class TcpProxy:
    """Forwards loopback connections on :attr:`port` to ``upstream`` until frozen or cut."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self._cut = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def freeze(self) -> None:
        """From now on, hold every byte in both directions and answer no new connection."""
        self.frozen.set()

    def cut(self) -> None:
        """Close every connection and the listening port: new connections are refused."""
        self._cut.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in (self._listener, *sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    close = cut

    def _keep(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._cut.is_set():
                return False
            self._sockets.append(sock)
            return True

    def _accept(self) -> None:
        while not self._cut.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._keep(client):
                client.close()
                return
            if self.frozen.is_set():
                continue  # accepted, never answered
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            if not self._keep(server):
                server.close()
                return
            for source, target in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, target), name="tcp-proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
                return
            while self.frozen.is_set() and not self._cut.is_set():
                time.sleep(0.05)  # hold the bytes: the peer waits for an answer
            try:
                target.sendall(data)
            except OSError:
                return


def proxied_kubeconfig(kubeconfig: str | Path, path: Path) -> tuple[Path, TcpProxy]:
    """Write to ``path`` a copy of ``kubeconfig`` whose server is reached through a new proxy;
    the path and the proxy (the caller cuts it when done)."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
    proxy = TcpProxy((host, int(port)))
    cluster["server"] = f"https://{host}:{proxy.port}"
    path.write_text(yaml.safe_dump(config))
    return path, proxy
