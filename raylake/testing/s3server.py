"""A real S3-compatible HTTP server on 127.0.0.1, in-process (moto's server mode).

Used by the test suite and bench/ to run raylake against ``s3://`` exactly as
against a cloud store: s3fs speaks HTTP to it, conditional writes included.
``latency_s`` delays every request, to measure what a remote store's round
trips cost (a cloud region is ~10-30 ms away).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable
from threading import Thread
from typing import Any

from raylake.errors import MissingDependencyError

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

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Latency:
    """WSGI middleware: every request waits ``seconds`` before it is served."""

    def __init__(self, app: WsgiApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds
        self.requests = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        self.requests += 1
        if self.seconds:
            time.sleep(self.seconds)
        return self.app(environ, start_response)


class _QuietHandler(MotoRequestHandler):  # type: ignore[misc]
    """Moto's handler without a log line per request (benchmarks make thousands)."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class LocalS3Server:
    """Start with ``with LocalS3Server() as s3:``; ``s3.storage_options`` opens it with s3fs."""

    def __init__(self, *, latency_s: float = 0.0) -> None:
        self.port = _free_port()
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
        name = name or f"raylake-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )
        client.create_bucket(Bucket=name)
        return name

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
