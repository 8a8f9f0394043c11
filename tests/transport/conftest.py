"""Fixtures: an in-process uvicorn server on 127.0.0.1, port 0, around a `FakeEngine`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from streamer.client import Frame, StreamClient
from streamer.transport.app import create_app
from streamer.transport.server import DrainingServer, uvicorn_config
from streamer.transport.settings import ServerSettings
from tests.fakes import FakeEngine


@dataclass
class RunningServer:
    engine: FakeEngine
    server: DrainingServer
    task: asyncio.Task

    @property
    def ctx(self):
        return self.server.ctx

    @property
    def url(self) -> str:
        return self.server.url.rstrip("/")

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/stream"


StartServer = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
async def start_server() -> AsyncIterator[StartServer]:
    running: list[RunningServer] = []

    async def _start(engine: FakeEngine | None = None, **settings) -> RunningServer:
        engine = engine or FakeEngine()
        settings.setdefault("stats_interval_s", 0)
        cfg = ServerSettings(**settings)
        app = create_app(engine, cfg)
        server = DrainingServer(uvicorn_config(app, cfg, "127.0.0.1", 0, "warning"), app.state.ctx)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        rs = RunningServer(engine, server, task)
        running.append(rs)
        return rs

    yield _start
    for rs in running:
        rs.server.should_exit = True
    await asyncio.gather(*(rs.task for rs in running), return_exceptions=True)


@pytest.fixture
async def server(start_server: StartServer) -> RunningServer:
    return await start_server()


HANG_GUARD_S = 30.0  # bounds a hang; never a timing assertion


async def next_event(ws, type_: str | None = None) -> dict:
    """The next JSON event (of `type_`, skipping binary chunks and other events)."""
    async with asyncio.timeout(HANG_GUARD_S):
        while True:
            msg = await ws.recv()
            if isinstance(msg, str):
                event = json.loads(msg)
                if type_ is None or event["type"] == type_:
                    return event


async def next_chunk(ws) -> bytes:
    async with asyncio.timeout(HANG_GUARD_S):
        while True:
            msg = await ws.recv()
            if isinstance(msg, bytes):
                return msg


async def next_frame(stream: StreamClient) -> Frame:
    async with asyncio.timeout(HANG_GUARD_S):
        return await stream.next_frame()


async def wait_until(predicate: Callable[[], bool], guard_s: float = HANG_GUARD_S) -> None:
    """Wait for a condition other tasks bring about (engine, server) that has no event to await."""
    async with asyncio.timeout(guard_s):
        while not predicate():  # noqa: ASYNC110 - state of other components, polled in a test
            await asyncio.sleep(0.02)
