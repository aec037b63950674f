"""Run the service in a background thread on a free loopback port (tests, benchmarks, the
example controller's demo): ``with BackgroundServer() as base_url: ...``."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from . import create_app


class BackgroundServer:
    """uvicorn serving ``create_app(**settings)`` on 127.0.0.1, a port the OS picks."""

    def __init__(self, app: Any = None, *, host: str = "127.0.0.1", **settings: Any) -> None:
        self.app = app if app is not None else create_app(**settings)
        config = uvicorn.Config(self.app, host=host, port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="pdtp-serve", daemon=True)
        self.url = ""

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("pdtp serve did not start")
            time.sleep(0.02)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
