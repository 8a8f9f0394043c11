"""Running the app under uvicorn: `serve()` with a drain-first shutdown (`DrainingServer`).

The first Ctrl-C (SIGINT/SIGTERM) ends every session through `engine.stop()` so each client
gets `ended`, gives the send loops a moment to flush it, then lets uvicorn close the sockets;
the process exits 0. A second Ctrl-C forces the exit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import FrameType

import uvicorn

from streamer.engine_api import EngineAPI
from streamer.transport.app import create_app, drain
from streamer.transport.context import TransportContext
from streamer.transport.settings import ServerSettings

log = logging.getLogger(__name__)
_FLUSH_S = 0.3


def uvicorn_config(
    app, settings: ServerSettings, host: str, port: int, log_level: str = "info"
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        lifespan="on",
        ws="websockets-sansio",
        ws_max_size=settings.ws_max_size,
        ws_ping_interval=settings.ws_ping_interval_s,
        ws_ping_timeout=settings.ws_ping_timeout_s,
        timeout_graceful_shutdown=5,
    )


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ctx: TransportContext,
                 on_started: Callable[[str], None] | None = None) -> None:  # fmt: skip
        super().__init__(config)
        self.ctx = ctx
        self.on_started = on_started
        self._drain_task: asyncio.Task | None = None
        self._draining = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/"

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started(self.url)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in _captured_signals: uvicorn would re-raise it after serving (exit 130).
        if self._loop is None:  # not serving yet: nothing to drain
            self.should_exit = True
            return
        if self._draining:
            self.force_exit = self.should_exit = True
            return
        self._draining = True
        # A signal handler may interrupt the loop anywhere: hand over through the thread-safe door.
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        log.info("draining sessions")
        await drain(self.ctx)
        await asyncio.sleep(_FLUSH_S)
        self.should_exit = True


async def serve(
    engine: EngineAPI,
    settings: ServerSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    on_started: Callable[[str], None] | None = None,
    server_out: list | None = None,
) -> int:
    """Serve until a signal drains the server. Returns the exit status."""
    app = create_app(engine, settings)
    server = DrainingServer(uvicorn_config(app, settings, host, port, log_level), app.state.ctx, on_started)
    if server_out is not None:
        server_out.append(server)
    await server.serve()
    return 0 if server.started else 1


def print_url(url: str) -> None:
    print(f"streamer: serving on {url}", flush=True)
