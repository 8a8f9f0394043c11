"""A client that stops reading, against the real engine: its chunks are dropped in a bounded
queue, the engine keeps the same pace for every session, and the other client misses nothing.

(tests/transport/test_slow_consumer.py covers the queue itself with the fake engine.)
"""

from __future__ import annotations

import asyncio
import json
import socket
from urllib.parse import urlparse

import websockets

from streamer.transport.chunk_codec import HEADER
from tests.faults.conftest import all_slots_free, session_stats, tiny_engine
from tests.transport.conftest import next_event, wait_until

QUEUE_CHUNKS = 4


def chunk_index(message: bytes) -> int:
    return HEADER.unpack_from(message)[6]


async def slow_connection(server):
    """A WebSocket whose reader stops after one message, over a narrow path: small socket
    buffers at both ends and a small write buffer in the server's transport, so that the
    server's send loop backs up after a few 6 KB chunks rather than after megabytes."""
    url = urlparse(server.ws_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (url.hostname, url.port))
    ws = await websockets.connect(server.ws_url, sock=sock, max_queue=1, max_size=None)
    port = sock.getsockname()[1]
    for conn in server.server.server_state.connections:
        transport = getattr(conn, "transport", None)
        if transport is not None and transport.get_extra_info("peername")[1] == port:
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            transport.set_write_buffer_limits(high=4096)
            break
    else:
        raise AssertionError("the server-side connection was not found")
    return ws


async def test_slow_consumer_does_not_hold_back_other_sessions(start_server):
    # Pings off: a peer that never reads would otherwise be dropped as dead after 10 s, which is
    # the right outcome but not the one under test here.
    server = await start_server(tiny_engine(), send_queue_chunks=QUEUE_CHUNKS, ws_ping_interval_s=0)
    engine, registry = server.engine, server.ctx.registry
    async with websockets.connect(server.ws_url, max_size=None) as normal:
        await normal.send(
            json.dumps({"type": "start", "prompt": "a red ball moving left on grass", "seed": 1})
        )
        normal_id = (await next_event(normal, "admitted"))["session_id"]
        received: list[int] = []
        errors: list[dict] = []

        async def read_normal() -> None:
            async for message in normal:
                if isinstance(message, bytes):
                    received.append(chunk_index(message))
                elif json.loads(message)["type"] == "error":
                    errors.append(json.loads(message))

        reader = asyncio.create_task(read_normal())
        await wait_until(lambda: len(received) >= 3)
        baseline = (await session_stats(engine))["sessions"][normal_id]

        slow = await slow_connection(server)
        await slow.send(
            json.dumps({"type": "start", "prompt": "a blue square on sand", "seed": 2, "encoding": "rgb"})
        )
        slow_id = (await next_event(slow, "admitted"))["session_id"]
        outbox = registry.sessions[slow_id].fanout.subscribers[0]  # the slow connection's ClientQueue
        longest = 0

        async def watch_queue() -> None:
            nonlocal longest
            while True:
                longest = max(longest, len(outbox._chunks))
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch_queue())
        try:
            # The slow client reads nothing more; its chunks start being dropped, not queued.
            await wait_until(lambda: outbox.frames_dropped > 0)
            before = (await session_stats(engine))["sessions"]
            got = len(received)
            await wait_until(lambda: len(received) >= got + 8)
            after = (await session_stats(engine))["sessions"]
        finally:
            watcher.cancel()
            reader.cancel()
        # Memory: the slow session's backlog never grew past its bound.
        assert longest <= QUEUE_CHUNKS
        assert outbox.frames_dropped > 0
        # The engine kept the same pace for both sessions: it never waits for a sink.
        made_slow = after[slow_id]["chunks"] - before[slow_id]["chunks"]
        made_normal = after[normal_id]["chunks"] - before[normal_id]["chunks"]
        assert made_slow > 0 and abs(made_slow - made_normal) <= 2, (made_slow, made_normal)
        # The other client got every chunk, in order, and no error.
        assert received == list(range(received[0], received[0] + len(received)))
        assert registry.sessions[normal_id].fanout.subscribers[0].frames_dropped == 0
        assert errors == []
        print(f"\nnormal session misses: {baseline['misses']} before the slow client, "
              f"{after[normal_id]['misses']} with it (of {after[normal_id]['chunks']} chunks); "
              f"slow session: {after[slow_id]['misses']} misses, {outbox.frames_dropped} frames dropped")  # fmt: skip

        # The slow client vanishes without a closing handshake: its session and slot are freed.
        slow.transport.abort()
        await wait_until(lambda: slow_id not in engine.sessions)
        assert engine.pool.free_slots == engine.pool.num_slots - 1
    await wait_until(lambda: all_slots_free(engine))
