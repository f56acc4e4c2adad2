"""A real S3-compatible HTTP server on 127.0.0.1 (moto's server mode).

Used by the test suite and bench/ to run raylake against ``s3://`` exactly as
against a cloud store: s3fs and pyarrow's S3 client speak HTTP to it, conditional
writes included. ``latency_s`` delays every request, to measure what a remote
store's round trips cost (a cloud region is ~10-30 ms away).

:class:`LocalS3Server` runs in the calling process; :class:`S3ServerProcess` runs
it in a process of its own (``python -m raylake.testing.s3server``), so that
throughput figures are not the server competing for the caller's GIL, and so that
a test can kill the server in the middle of a read.

Both can inject faults by a seeded :class:`~raylake.testing.faults.FaultPlan`
(503 SlowDown, 500 InternalError, connection resets, slow answers, and requests
carried out whose answer is lost): ``server.set_faults(plan)``, and
``server.fault_stats()`` for what was injected.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from threading import Lock, Thread
from typing import Any

from raylake.errors import MissingDependencyError
from raylake.testing.faults import FaultInjector, FaultPlan, FaultRule

try:
    import boto3
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import BaseWSGIServer, make_server
except ImportError as exc:  # pragma: no cover - the test extra is installed in CI
    raise MissingDependencyError("moto[server] and boto3", "test") from exc

_CONTROL = "/_raylake/latency/"
_FAULTS = "/_raylake/faults"
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Latency:
    """WSGI middleware: every request waits ``seconds`` before it is served, and gets
    the fault a :class:`FaultPlan` gives it, if any."""

    def __init__(self, app: WsgiApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds
        self.requests = 0
        self.faults = FaultInjector(FaultPlan())
        self._creates = Lock()
        # The latest requests: (method, path, Range header), for tests that count round trips.
        self.log: deque[tuple[str, str, str | None]] = deque(maxlen=10_000)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith(_CONTROL):  # S3 bucket names cannot start with "_"
            self.seconds = float(path[len(_CONTROL) :])
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        if path == _FAULTS:
            return self._control_faults(environ, start_response)
        self.requests += 1
        method = str(environ.get("REQUEST_METHOD"))
        self.log.append((method, path, environ.get("HTTP_RANGE")))
        if self.seconds:
            time.sleep(self.seconds)
        conditional = environ.get("HTTP_IF_NONE_MATCH") == "*"
        app = self._create if conditional else self.app
        rule = self.faults.decide(method, path, conditional)
        if rule is None:
            return app(environ, start_response)
        return _inject(rule, app, environ, start_response)

    def _create(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """A conditional create (``If-None-Match: *``), one at a time. moto checks that
        the key is absent and then stores the object, unlocked: two creates of one key
        served by two threads could both pass the check and both be answered 200, the
        later overwriting the earlier, where S3 lets exactly one succeed. Two commits
        then both took one snapshot id, and the overwritten one's rows were lost
        (tests/s3/test_conditional_create.py)."""
        with self._creates:
            answer = self.app(environ, start_response)
            try:
                return list(answer)
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()

    def _control_faults(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length).decode()
            self.faults = FaultInjector(FaultPlan.from_json(body))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(self.faults.stats()).encode()]


_ERRORS = {
    "slowdown": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
    "internal": ("500 Internal Server Error", "InternalError", "We encountered an internal error."),
    "lost": ("500 Internal Server Error", "InternalError", "We encountered an internal error."),
}


def _inject(
    rule: FaultRule, app: WsgiApp, environ: dict[str, Any], start_response: Callable[..., Any]
) -> Any:
    if rule.kind == "slow":
        time.sleep(rule.delay_s)
        return app(environ, start_response)
    if rule.kind == "truncated":
        return _truncated(app, environ, start_response)
    if rule.kind in ("lost", "lost_reset"):
        # Carry the request out, answer discarded: the store did it, the client cannot know.
        answer = app(environ, lambda *args, **kwargs: None)
        try:
            for _ in answer:
                pass
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()
    if rule.kind in ("reset", "lost_reset"):
        # Answered into a closed socket: werkzeug takes it for a dropped connection.
        start_response("500 Internal Server Error", [("Content-Length", "0")])
        _drop_connection(environ)
        return []
    status, code, message = _ERRORS[rule.kind]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>raylake-fault</RequestId></Error>"
    ).encode()
    # The request body must be read, or the client may see a reset instead of the answer.
    if rule.kind != "lost":
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response(
        status,
        [("Content-Type", "application/xml"), ("Content-Length", str(len(body))),
         ("Connection", "close")],
    )  # fmt: skip
    return [body]


def _truncated(app: WsgiApp, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
    """Serve the request, but send only half of its answer's body (the headers announce
    all of it), then drop the connection: a read cut short in the middle."""
    answered: list[Any] = []
    answer = app(environ, lambda *args, **kwargs: answered.append(args))
    try:
        body = b"".join(answer)
    finally:
        close = getattr(answer, "close", None)
        if close is not None:
            close()
    status, headers = answered[0][0], list(answered[0][1])
    if not any(k.lower() == "content-length" for k, _ in headers):  # a HEAD keeps its own
        headers.append(("Content-Length", str(len(body))))
    start_response(status, headers)

    def cut() -> Iterator[bytes]:
        yield body[: len(body) // 2]
        _drop_connection(environ)

    return cut()


def _drop_connection(environ: dict[str, Any]) -> None:
    sock = environ.get("werkzeug.socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class _QuietHandler(MotoRequestHandler):  # type: ignore[misc]
    """Moto's handler without a log line per request (benchmarks make thousands)."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class LocalS3Server:
    """Start with ``with LocalS3Server() as s3:``; ``s3.storage_options`` opens it with s3fs."""

    def __init__(self, *, latency_s: float = 0.0, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._app = _Latency(DomainDispatcherApplication(create_backend_app), latency_s)
        self._server: BaseWSGIServer | None = None
        self._thread: Thread | None = None
        # Any key works against moto; these are fake and only name the test account.
        self.access_key = "raylake-test-key"
        self.secret_key = f"raylake-test-secret-{uuid.uuid4().hex}"

    @property
    def latency_s(self) -> float:
        return self._app.seconds

    @latency_s.setter
    def latency_s(self, seconds: float) -> None:
        self._app.seconds = seconds

    @property
    def requests(self) -> int:
        return self._app.requests

    @property
    def request_log(self) -> list[tuple[str, str, str | None]]:
        """The latest requests served: (method, path, Range header)."""
        return list(self._app.log)

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Inject faults by ``plan`` from now on (None: none); the counts start at 0."""
        _post_faults(self.endpoint_url, plan)

    def fault_stats(self) -> dict[str, Any]:
        """Requests served and faults injected (by kind) since the plan was set."""
        return _get_faults(self.endpoint_url)

    @property
    def storage_options(self) -> dict[str, Any]:
        """s3fs options for this server; a fresh filesystem instance per FileIO."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def start(self) -> LocalS3Server:
        self._server = make_server(
            "127.0.0.1", self.port, self._app, threaded=True, request_handler=_QuietHandler
        )
        self._thread = Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (names of 3+ characters) and return its name."""
        return _create_bucket(self.endpoint_url, self.access_key, self.secret_key, name)

    def client(self) -> Any:
        """A boto3 S3 client of this server's own: what a test checks stored objects
        with, apart from the clients raylake configures."""
        return _client(self.endpoint_url, self.access_key, self.secret_key)

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3ServerProcess:
    """The same server in a child process; ``kill()`` drops it at once, mid-request."""

    def __init__(self, *, latency_s: float = 0.0) -> None:
        self.port = _free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.access_key = "raylake-test-key"
        self.secret_key = f"raylake-test-secret-{uuid.uuid4().hex}"
        self._latency_s = latency_s
        self._child: subprocess.Popen[bytes] | None = None

    storage_options = LocalS3Server.storage_options
    set_faults = LocalS3Server.set_faults
    fault_stats = LocalS3Server.fault_stats

    @property
    def latency_s(self) -> float:
        return self._latency_s

    @latency_s.setter
    def latency_s(self, seconds: float) -> None:
        url = f"{self.endpoint_url}{_CONTROL}{seconds}"
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10):
            pass
        self._latency_s = seconds

    def start(self, timeout_s: float = 60.0) -> S3ServerProcess:
        command = [sys.executable, "-m", "raylake.testing.s3server", "--port", str(self.port)]
        command += ["--latency", str(self._latency_s)]
        self._child = subprocess.Popen(command, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not _accepts(self.port):
            if self._child.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the S3 server process did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        """Stop the server without a goodbye: connections in flight are cut."""
        if self._child is not None and self._child.poll() is None:
            os.killpg(self._child.pid, signal.SIGKILL)
            self._child.wait(timeout=30)

    stop = kill

    def create_bucket(self, name: str | None = None) -> str:
        return _create_bucket(self.endpoint_url, self.access_key, self.secret_key, name)

    def __enter__(self) -> S3ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _post_faults(endpoint_url: str, plan: FaultPlan | None) -> None:
    body = (plan or FaultPlan()).to_json().encode()
    request = urllib.request.Request(f"{endpoint_url}{_FAULTS}", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass


def _get_faults(endpoint_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{endpoint_url}{_FAULTS}", timeout=30) as answer:
        return dict(json.loads(answer.read()))


def _client(endpoint_url: str, key: str, secret: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def _create_bucket(endpoint_url: str, key: str, secret: str, name: str | None) -> str:
    name = name or f"raylake-{uuid.uuid4().hex[:12]}"
    _client(endpoint_url, key, secret).create_bucket(Bucket=name)
    return name


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description="moto's S3 server on 127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    args = parser.parse_args()
    server = LocalS3Server(latency_s=args.latency, port=args.port)
    server._server = make_server(
        "127.0.0.1", server.port, server._app, threaded=True, request_handler=_QuietHandler
    )
    server._server.serve_forever()


if __name__ == "__main__":
    main()
