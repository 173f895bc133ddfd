"""A fault-injecting HTTP proxy in front of hipobj-server: it answers the
first tries of chosen requests itself (``503 SlowDown`` with
``Retry-After``, or a ``4xx``), or resets the connection once it has read
the request, and forwards the rest unchanged (the Host header included, so
signatures hold; the RDMA goes between the client and the server as
without it)."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

# What a rule answers instead of forwarding: (status, S3 code, extra headers).
Fault = Tuple[int, str, Dict[str, str]]
SLOW_DOWN: Fault = (503, "SlowDown", {"Retry-After": "1"})
# No answer: the request is read whole, then the connection is closed with
# a TCP reset (SO_LINGER 0), as a load balancer or a crashed server does.
# The log records status 0.
RESET: Fault = (0, "", {})


def kind(method: str, path: str, headers) -> str:
    """The S3 operation of a request, as far as the proxy needs to tell."""
    q = parse_qs(urlsplit(path).query, keep_blank_values=True)
    token = any(h.lower() == "x-amz-rdma-token" for h in headers.keys())
    if method == "HEAD":
        return "HeadObject"
    if method == "POST" and "uploads" in q:
        return "CreateMultipartUpload"
    if method == "POST" and "uploadId" in q:
        return "CompleteMultipartUpload"
    if method == "DELETE" and "uploadId" in q:
        return "AbortMultipartUpload"
    if method == "PUT" and "partNumber" in q:
        return "UploadPart+token" if token else "UploadPart"
    if method == "PUT":
        return "PutObject+token" if token else "PutObject"
    if method == "GET":
        return "GetObject+token" if token else "GetObject"
    return method


class FaultProxy:
    """``rule(kind, where, attempt)`` (``where``: the path with its query
    and Range; attempt: how many requests of this kind and place came
    before) gives a :data:`Fault` or None (forward). ``log`` records
    ``(kind, where, status, token)`` of every request (``token``: its
    ``x-amz-rdma-token``, or None)."""

    def __init__(self, upstream: str, rule: Callable[[str, str, int], Optional[Fault]]):
        up = urlsplit(upstream)
        self.rule = rule
        self.log: List[Tuple[str, str, int, Optional[str]]] = []
        self._seen: Dict[Tuple[str, str], int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _any(self):
                body = self._body()
                k = kind(self.command, self.path, self.headers)
                # One request and its retries: the path with its query
                # (uploadId, partNumber) and the Range it asks for.
                rng = self.headers.get("Range")
                token = self.headers.get("x-amz-rdma-token")
                where = self.path + (f" [{rng}]" if rng else "")
                with proxy._lock:
                    attempt = proxy._seen.get((k, where), 0)
                    proxy._seen[(k, where)] = attempt + 1
                fault = proxy.rule(k, where, attempt)
                if fault == RESET:
                    with proxy._lock:
                        proxy.log.append((k, where, 0, token))
                    self.close_connection = True
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if fault is not None:
                    status, code, extra = fault
                    with proxy._lock:
                        proxy.log.append((k, where, status, token))
                    xml = f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the test's proxy</Message></Error>".encode()
                    self.send_response(status)
                    for h, v in extra.items():
                        self.send_header(h, v)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(xml) if self.command != "HEAD" else 0))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(xml)
                    return
                conn = getattr(self, "_up", None)
                if conn is None:
                    conn = self._up = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for h, v in self.headers.items():
                    if h.lower() not in ("connection", "expect"):
                        conn.putheader(h, v)
                conn.endheaders(body if body else None)
                r = conn.getresponse()
                data = r.read()
                # Logged before the client has its answer: a test that
                # sets a new rule right after a call sees a log without it.
                with proxy._lock:
                    proxy.log.append((k, where, r.status, token))
                self.send_response(r.status, r.reason)
                for h, v in r.getheaders():
                    if h.lower() in ("transfer-encoding", "connection", "content-length"):
                        continue
                    self.send_header(h, v)
                length = r.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def set_rule(self, rule: Callable[[str, str, int], Optional[Fault]]) -> None:
        """From now on, ``rule``; the log and the tries seen start afresh."""
        with self._lock:
            self.rule = rule
            self.log.clear()
            self._seen.clear()

    def count(self, status: int, kinds=None) -> int:
        with self._lock:
            return sum(1 for k, _, s, _ in self.log if s == status and (kinds is None or k in kinds))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
