"""A chapline HTTP app served by uvicorn in a thread of the test process."""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn


class LiveServer:
    """uvicorn on a pre-bound loopback socket, in a background thread.

    `stop()` ends the desk's event streams first: they never finish on their
    own, and uvicorn waits for every open response before it stops.

    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.app.state.events.close()
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()
