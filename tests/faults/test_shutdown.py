"""Shutdown while streaming (the Ctrl-C path): every session, on either transport, ends with an
`ended` event, and the server leaves nothing behind: no engine or encoder thread, no cache slot,
no peer, no registered session, no socket."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading

import websockets

from streamer.client import connect
from tests.faults.conftest import all_slots_free, tiny_engine
from tests.transport.conftest import HANG_GUARD_S, next_chunk, next_event, next_frame, wait_until


def sockets() -> int:
    fds = os.listdir("/proc/self/fd")
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return sum(link.startswith("socket:") for link in links)


def server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("streamer-") and t.is_alive()]


async def test_shutdown_while_streaming_ends_every_session_and_leaks_nothing(start_server):
    sockets_before = sockets()
    server = await start_server(tiny_engine())
    engine, ctx = server.engine, server.ctx
    ws_clients = []
    for prompt in ("a red ball on grass", "a blue square on sea"):
        ws = await websockets.connect(server.ws_url, max_size=None)
        await ws.send(json.dumps({"type": "start", "prompt": prompt}))
        await next_event(ws, "admitted")
        await next_chunk(ws)
        ws_clients.append(ws)
    rtc = await connect(server.url, "webrtc", prompt="a green ball on sand")
    await next_frame(rtc)
    assert len(engine.sessions) == 3 and server_threads()

    server.server.handle_exit(signal.SIGINT, None)  # what Ctrl-C does: drain, then exit

    for ws in ws_clients:
        assert (await next_event(ws, "ended"))["reason"] == "shutdown"
        await wait_until(lambda ws=ws: ws.close_code is not None)
        assert ws.close_code == 1000
    async with asyncio.timeout(HANG_GUARD_S):
        await rtc.ended_event.wait()
    assert any(e["type"] == "ended" and e["reason"] == "shutdown" for e in rtc.events), list(rtc.events)
    async with asyncio.timeout(HANG_GUARD_S):
        await server.task
    await rtc.close()

    assert engine._thread is not None and not engine._thread.is_alive()
    assert not engine.ready()
    assert all_slots_free(engine)
    assert not ctx.peers and not ctx.registry.sessions
    await wait_until(lambda: not server_threads())
    await wait_until(lambda: sockets() <= sockets_before)
