"""Clients that vanish without a goodbye free their sessions and cache slots.

When the server notices, by design:
- TCP reset or FIN without a WebSocket close frame: at once (the receive loop sees it);
- a WebSocket peer that stops answering (frozen process, dead network): after
  `ws_ping_interval_s + ws_ping_timeout_s` (10 s by default; 1.5 s in this test);
- a WebRTC peer that disappears without `stop`, DELETE or DTLS close: after 6 failed ICE
  consent checks (about 30 s by default; the test shortens aioice's check interval to ~5 s).
Each test waits for the session, its slot and `/v1/info` to be freed within that figure plus
`SLACK_S` for a loaded machine: the bound the behaviour must meet, not a latency measurement.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import aioice.ice
import pytest

from streamer import metrics
from streamer.client import StreamClient, connect
from tests.faults.conftest import all_slots_free, info, tiny_engine
from tests.transport.conftest import HANG_GUARD_S, next_frame, wait_until

ROOT = Path(__file__).resolve().parents[2]
SLACK_S = 10.0
PING_S, PING_TIMEOUT_S = 0.5, 1.0
CONSENT_INTERVAL_S = 0.3  # aioice waits 0.8-1.2x this between checks, each failing after 0.5 s
CONSENT_BOUND_S = 6 * (1.2 * CONSENT_INTERVAL_S + 0.5)
# A user's process: starts a session, prints its id after the first frame, then idles.
CLIENT = """
import asyncio, sys
from streamer.client import connect

async def main():
    stream = await connect(sys.argv[1], sys.argv[2], prompt="a red ball moving left on grass", seed=3)
    await stream.next_frame()
    print(stream.session["session_id"], flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


async def client_process(url: str, transport: str) -> tuple[asyncio.subprocess.Process, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, url, transport, cwd=ROOT, env=env,
                                                stdout=asyncio.subprocess.PIPE)  # fmt: skip
    try:
        async with asyncio.timeout(HANG_GUARD_S * 2):
            line = await proc.stdout.readline()  # type: ignore[union-attr]
    except TimeoutError:
        proc.kill()
        raise
    assert line, "the client process exited before its first frame"
    return proc, line.decode().strip()


async def fresh_frame(stream: StreamClient) -> None:
    """A frame received after this call (older ones may wait in the client's queue)."""
    since = time.time()
    async with asyncio.timeout(HANG_GUARD_S):
        while (await stream.next_frame()).recv_ts <= since:
            pass


async def started(url: str, prompt: str) -> StreamClient:
    stream = await connect(url, "ws", prompt=prompt)
    await next_frame(stream)
    return stream


@pytest.mark.parametrize("how", ["reset", "fin"])
async def test_abrupt_websocket_disconnects_free_sessions_and_slots(start_server, how):
    server = await start_server(tiny_engine())
    engine = server.engine
    connections = metrics.CONNECTIONS.labels("ws")
    keeper = await started(server.url, "a green ball on sand")
    goners = [await started(server.url, p) for p in ("a red ball on grass", "a blue square on sea")]
    gone = [g.session["session_id"] for g in goners]
    assert engine.pool.free_slots == engine.pool.num_slots - 3
    for stream in goners:
        transport = stream.ws.transport  # type: ignore[attr-defined]
        if how == "reset":  # linger 0: close() sends RST instead of FIN
            transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
        transport.abort()  # no close frame either way
    await wait_until(lambda: engine.pool.free_slots == engine.pool.num_slots - 1, SLACK_S)
    assert not any(sid in engine.sessions for sid in gone)
    assert not any(sid in server.ctx.registry.sessions for sid in gone)
    assert (await info(server.url))["sessions"] == 1
    await wait_until(lambda: connections._value.get() == 1)
    # The survivor never noticed.
    await fresh_frame(keeper)
    assert keeper.ended is None and keeper.session["session_id"] in engine.sessions
    await keeper.close()
    await wait_until(lambda: all_slots_free(engine), SLACK_S)
    assert (await info(server.url))["sessions"] == 0


async def test_frozen_websocket_client_is_dropped_by_pings(start_server):
    server = await start_server(tiny_engine(), ws_ping_interval_s=PING_S, ws_ping_timeout_s=PING_TIMEOUT_S)
    engine = server.engine
    proc, sid = await client_process(server.url, "ws")
    try:
        assert sid in engine.sessions
        proc.send_signal(signal.SIGSTOP)  # the kernel still holds the socket open; nobody answers pings
        await wait_until(lambda: all_slots_free(engine), PING_S + PING_TIMEOUT_S + SLACK_S)
        assert (await info(server.url))["sessions"] == 0
    finally:
        proc.kill()
        await proc.wait()


async def test_vanished_webrtc_peer_frees_session_and_slot(start_server, monkeypatch):
    monkeypatch.setattr(aioice.ice, "CONSENT_INTERVAL", CONSENT_INTERVAL_S)  # the server's side only
    server = await start_server(tiny_engine())
    engine = server.engine
    keeper = await started(server.url, "a green ball on sand")
    proc, sid = await client_process(server.url, "webrtc")
    assert sid in engine.sessions and sid in server.ctx.peers
    proc.kill()  # SIGKILL: no `stop`, no DELETE, no DTLS close_notify, no ICE
    await proc.wait()
    await wait_until(lambda: engine.pool.free_slots == engine.pool.num_slots - 1, CONSENT_BOUND_S + SLACK_S)
    assert sid not in engine.sessions
    await wait_until(lambda: sid not in server.ctx.peers)
    assert (await info(server.url))["sessions"] == 1
    await fresh_frame(keeper)
    assert keeper.ended is None
    await keeper.close()
    await wait_until(lambda: all_slots_free(engine), SLACK_S)
    assert (await info(server.url))["sessions"] == 0
