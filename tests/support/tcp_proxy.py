"""A loopback TCP proxy in front of a real server, which a test can cut (an outage) and restore.

with TcpProxy(("127.0.0.1", 5432)) as proxy:
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/db"
    proxy.cut()      # every open connection dropped, new ones closed as soon as they arrive
    proxy.restore()  # connections pass again
"""

from __future__ import annotations

import contextlib
import socket
import threading

_CHUNK = 64 * 1024


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._open = True
        self._closed = False

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    def __enter__(self) -> TcpProxy:
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._listener.close()
        self._drop_all()

    def cut(self) -> None:
        with self._lock:
            self._open = False
        self._drop_all()

    def restore(self) -> None:
        with self._lock:
            self._open = True

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                passing = self._open
            if not passing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._sockets -= {source, sink}
