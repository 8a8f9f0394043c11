"""Fault tests run the real `Engine` on the tiny random model behind the real app.

`start_server` (from the transport tests) serves it in-process on 127.0.0.1, port 0, so a test
can look inside: the engine's sessions and cache pool, the transports' registry and peers.
`ThreadedServer` serves it from a background thread for synchronous clients (hypothesis).
Waits are bounded by `HANG_GUARD_S` and never asserted on: these tests check behaviour only.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import httpx
import pytest

from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.transport.app import create_app
from streamer.transport.server import DrainingServer, uvicorn_config
from streamer.transport.settings import ServerSettings
from tests.transport.conftest import (  # noqa: F401 - fixtures and helpers shared with the transport tests
    HANG_GUARD_S,
    RunningServer,
    StartServer,
    next_chunk,
    next_event,
    start_server,
    wait_until,
)

FPS = 8.0  # low, so several sessions fit on a shared 2-core machine


def tiny_engine(**overrides) -> Engine:
    """The real engine around the tiny random model (32x32, 2-frame chunks)."""
    cfg = {"max_sessions": 4, "fps": FPS, "degrade": False}
    cfg.update(overrides)
    return Engine(tiny_embedded(), EngineConfig(**cfg))


@pytest.fixture
async def real_server(start_server: StartServer) -> RunningServer:  # noqa: F811
    return await start_server(tiny_engine())


def all_slots_free(engine: Engine) -> bool:
    return engine.pool.free_slots == engine.pool.num_slots and not engine.sessions


async def info(url: str) -> dict:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{url}/v1/info")).json()


async def session_stats(engine: Engine) -> dict:
    """The scheduler's per-session figures, read on the model thread (it is not thread-safe)."""
    return await engine._call(engine.scheduler.stats)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class ThreadedServer:
    """The app under uvicorn on its own thread and event loop (uvicorn skips signal handlers
    off the main thread). `url` is valid inside the `with` block."""

    def __init__(self, engine: Engine, **settings) -> None:
        self.engine = engine
        settings.setdefault("stats_interval_s", 0)
        self.settings = ServerSettings(**settings)
        self.server: DrainingServer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._up = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fault-test-server", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url.rstrip("/")

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/stream"

    def _main(self) -> None:
        async def serve() -> None:
            app = create_app(self.engine, self.settings)
            self.server = DrainingServer(
                uvicorn_config(app, self.settings, "127.0.0.1", 0, "warning"), app.state.ctx
            )
            self.loop = asyncio.get_running_loop()
            task = asyncio.create_task(self.server.serve())
            while not self.server.started and not task.done():  # noqa: ASYNC110 - uvicorn sets a flag
                await asyncio.sleep(0.01)
            self._up.set()
            await task

        try:
            asyncio.run(serve())
        except BaseException as exc:  # reported by __enter__ / __exit__
            self._error = exc
        finally:
            self._up.set()

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        self._up.wait(HANG_GUARD_S * 4)
        if self._error is not None or self.server is None or not self.server.started:
            raise RuntimeError(f"server did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None and self.server is not None:
            self.loop.call_soon_threadsafe(setattr, self.server, "should_exit", True)
        self._thread.join(HANG_GUARD_S)


@pytest.fixture
def threaded_server() -> Iterator[ThreadedServer]:
    with ThreadedServer(tiny_engine()) as server:
        yield server
