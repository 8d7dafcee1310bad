"""The local host's HTTP triggers on ``http://127.0.0.1:<port>/api/<route>``, and the keys their
routes check by auth level, as the Functions host serves and checks them."""

from __future__ import annotations

import contextlib
import hmac
import logging
import re
import secrets
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from localrun.host import triggers
from localrun.host.index import IndexedFunction as _Function
from localrun.host.state import HostStopping
from localrun.host.triggers import TriggerData

log = logging.getLogger("localrun.host")


@dataclass(frozen=True)
class HostKeys:
    """The keys the HTTP routes check: a function key (``function`` level) and the master key.

    In Azure the host keeps them in its secret store; here they come from the settings
    ``LOCALRUN_FUNCTION_KEY`` and ``LOCALRUN_MASTER_KEY``, or are made up at start-up.
    """

    function: str
    master: str

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> HostKeys:
        return cls(settings.get("LOCALRUN_FUNCTION_KEY") or secrets.token_urlsafe(32),
                   settings.get("LOCALRUN_MASTER_KEY") or secrets.token_urlsafe(32))

    def allow(self, level: str, presented: str | None) -> bool:
        """As the host: anonymous needs nothing, function a function or the master key, admin
        the master key."""
        level = level.upper()
        if level == "ANONYMOUS":
            return True
        if not presented:
            return False
        # Compared as bytes: compare_digest refuses a str with a non-ASCII character (a header
        # is read as Latin-1, a ?code= as UTF-8), and a malformed key is a wrong key, a 401.
        given = presented.encode("utf-8", "surrogatepass")
        master = hmac.compare_digest(given, self.master.encode("utf-8", "surrogatepass"))
        if level == "ADMIN":
            return master
        return master or hmac.compare_digest(given,
                                             self.function.encode("utf-8", "surrogatepass"))


class HttpHost(Protocol):
    """What the HTTP server asks of the host that runs it (host.py's LocalFunctionHost, which
    imports this module: it is not imported here)."""

    @property
    def keys(self) -> HostKeys: ...

    @property
    def closing(self) -> bool: ...

    def run(self, f: _Function, trigger: TriggerData) -> Any: ...


def _route_pattern(route: str) -> re.Pattern[str]:
    parts = []
    for seg in route.strip("/").split("/"):
        m = re.fullmatch(r"\{(\w+)(?::\w+)?(\?)?\}", seg)
        if m:
            parts.append(f"(?P<{m.group(1)}>[^/]+){'?' if m.group(2) else ''}")
        else:
            parts.append(re.escape(seg))
    return re.compile("^" + "/".join(parts) + "$")


def serve_http(host: HttpHost, functions: list[_Function],
                port: int) -> ThreadingHTTPServer:
    routes = [(_route_pattern(f.trigger.get("route") or f.name),
               {m.upper() for m in f.trigger.get("methods") or ["GET", "POST"]}, f)
              for f in functions]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _dispatch(self) -> None:
            # While a request is served its connection is busy: a stopping host does not wait
            # for it (an invocation may hang), only for the idle ones to close.
            server = self.server
            assert isinstance(server, _Server)
            server.serving(self.connection, True)
            try:
                self._serve_request()
            finally:
                server.serving(self.connection, False)

        def _serve_request(self) -> None:
            # The body is read only for a caller the route lets in: a request refused before
            # (no route, no key, the host stopping) costs no more than its headers, and its
            # connection is closed rather than left with an unread body in it.
            url = urlsplit(self.path)
            if host.closing:  # a kept-alive connection's request after the host stopped
                return self._stopping()
            path = url.path
            if not path.startswith("/api/"):
                return self._refuse(404, b"not found")
            for pattern, methods, f in routes:
                m = pattern.match(path[len("/api/"):])
                if not m:
                    continue
                if self.command not in methods:
                    # The Functions host answers a method a route does not take with a 404 and
                    # no body, as for no route (azure-functions-host#10098); another function
                    # may take it on the same route.
                    continue
                query = parse_qs(url.query, keep_blank_values=True)
                key = self.headers.get("x-functions-key") or next(iter(query.get("code", [])),
                                                                   None)
                if not host.keys.allow(f.trigger.get("authLevel", "FUNCTION"), key):
                    return self._refuse(401, b"")  # the host answers with an empty body
                body = self._body()
                if body is None:
                    return self._refuse(400, b"")
                # As the worker builds them: repeated query keys joined with commas, route
                # values percent-decoded.
                req = TriggerData(triggers.http_request, dict(
                    method=self.command, url=f"http://127.0.0.1:{port}{self.path}",
                    # X-Forwarded-For as a proxy sets it: what came (a local proxy's word of
                    # where its request came from), then the peer's address (the app trusts an
                    # identity off the platform only from this machine: shared/platform.py).
                    headers={**{k: v for k, v in self.headers.items()
                                if k.lower() != "x-forwarded-for"},
                             "X-Forwarded-For": ", ".join(
                                 [*self.headers.get_all("X-Forwarded-For", []),
                                  self.client_address[0]])},
                    query={k: ",".join(v) for k, v in query.items()},
                    route={k: unquote(v) for k, v in m.groupdict().items() if v is not None},
                    body=body))
                try:
                    resp = host.run(f, req)
                except HostStopping:
                    return self._stopping()
                except Exception:
                    log.exception("%s failed", f.name)
                    return self._reply(500, b"", {})  # the host answers with an empty body
                headers = dict(resp.headers)
                if resp.mimetype and not any(k.lower() == "content-type" for k in headers):
                    headers["Content-Type"] = f"{resp.mimetype}; charset={resp.charset or 'utf-8'}"
                return self._reply(resp.status_code, resp.get_body(), headers)
            return self._refuse(404, b"")

        def _body(self) -> bytes | None:
            """The request's body, or None when its Content-Length is no length."""
            given = self.headers.get("Content-Length") or "0"
            if not re.fullmatch(r"[0-9]+", given):  # the host answers 400 to a malformed length
                return None
            length = int(given)
            return self.rfile.read(length) if length else b""

        def _refuse(self, status: int, body: bytes) -> None:
            """An answer before the request's body was read: the connection cannot carry
            another request after an unread body, so it is closed."""
            if self.headers.get("Content-Length", "0") not in ("", "0") \
                    or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                return self._reply(status, body, {"Connection": "close"})
            return self._reply(status, body, {})

        def _stopping(self) -> None:
            # What a host that is shutting down answers: try again (elsewhere, or later).
            self.close_connection = True
            self._reply(503, b"the function host is stopping\n",
                        {"Content-Type": "text/plain; charset=utf-8", "Connection": "close",
                         "Retry-After": "5"})

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            try:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # The caller gave up (an Agent at its complete-by): nobody to answer.
                self.close_connection = True

        def __getattr__(self, name: str) -> Any:
            # Any method at all (TRACE, QUERY, ...) goes through the routes: http.server would
            # answer 501 to one it does not know, the Functions host a 404.
            if name.startswith("do_"):
                return self._dispatch
            raise AttributeError(name)

    return _Server(("127.0.0.1", port), Handler)


# How long a stopping host waits at most for its idle connections to close.
DRAIN_SECONDS = 2.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 drops bursts of connections; the client then waits seconds
    # for a SYN retransmit, which looks like a slow service.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        # Before the bind: a port in use closes the server from within the constructor.
        self._open: set[socket.socket] = set()
        self._busy: set[socket.socket] = set()
        self._open_lock = threading.Condition()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def serving(self, conn: socket.socket, busy: bool) -> None:
        with self._open_lock:
            (self._busy.add if busy else self._busy.discard)(conn)
            self._open_lock.notify_all()

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self._open_lock:
            self._open.discard(request)
            self._open_lock.notify_all()

    def server_close(self) -> None:
        """A stopped host closes its kept-alive connections, as a process that exits does:
        a client's pooled connection then ends (it opens a new one to whoever listens next)
        rather than reaching a host that answers 503. Reads are shut, not writes, so an
        invocation still under way sends its answer before its connection closes; and the idle
        connections are waited for (a while) to close, so that a request sent after the stop
        cannot reach one whose handler had not yet turned to read it."""
        super().server_close()
        with self._open_lock:
            held = list(self._open)
        for conn in held:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)
        with self._open_lock:
            self._open_lock.wait_for(lambda: self._open <= self._busy, timeout=DRAIN_SECONDS)
