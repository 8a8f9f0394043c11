"""Overload: a burst of users beyond capacity is refused cleanly, with the reason, on both
transports, while the admitted sessions keep streaming; and a model thread that never runs out
of work still serves control messages, closes and new sessions between its steps."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from streamer import metrics
from streamer.client import StreamError, connect
from tests.faults.conftest import all_slots_free, info, tiny_engine
from tests.transport.conftest import next_chunk, next_event, next_frame, wait_until

CAPACITY = 2
BURST = 6


async def first_answer(url: str, i: int):
    ws = await websockets.connect(url, max_size=None)
    await ws.send(json.dumps({"type": "start", "prompt": "a red ball on grass", "seed": i}))
    return ws, await next_event(ws)


async def test_burst_beyond_capacity_is_refused_cleanly(start_server):
    server = await start_server(tiny_engine(max_sessions=CAPACITY))
    engine = server.engine
    refused_counter = metrics.SESSIONS_REFUSED
    refused_before = refused_counter._value.get()
    answers = await asyncio.gather(*(first_answer(server.ws_url, i) for i in range(BURST)))
    admitted = [ws for ws, event in answers if event["type"] == "admitted"]
    refused = [(ws, event) for ws, event in answers if event["type"] == "refused"]
    assert len(admitted) == CAPACITY and len(refused) == BURST - CAPACITY, [e for _, e in answers]
    for ws, event in refused:
        assert "session limit" in event["reason"] and f"max_sessions {CAPACITY}" in event["reason"], event
        await wait_until(lambda ws=ws: ws.close_code is not None)
        assert ws.close_code == 1013
    # WebRTC is refused the same way (503 with the reason), and leaves no peer behind.
    with pytest.raises(StreamError) as err:
        await connect(server.url, "webrtc", prompt="a blue square")
    assert err.value.event["type"] == "refused" and "session limit" in err.value.event["reason"]
    assert not server.ctx.peers
    assert refused_counter._value.get() == refused_before + BURST - CAPACITY + 1
    assert engine.pool.free_slots == 0 and len(engine.sessions) == CAPACITY
    assert (await info(server.url))["sessions"] == CAPACITY
    # The admitted ones never noticed.
    for ws in admitted:
        for _ in range(3):
            await next_chunk(ws)
        await ws.close()
    await wait_until(lambda: all_slots_free(engine))


async def test_refusal_by_predicted_utilisation_names_the_figures(start_server):
    server = await start_server(tiny_engine(utilisation_bound=1e-6))
    first, event = await first_answer(server.ws_url, 0)  # an idle server always takes one session
    assert event["type"] == "admitted"
    ws, event = await first_answer(server.ws_url, 1)
    assert event["type"] == "refused"
    assert "predicted utilisation" in event["reason"] and "bound" in event["reason"], event
    await wait_until(lambda: ws.close_code is not None)
    assert ws.close_code == 1013
    await next_chunk(first)
    await first.close()
    await wait_until(lambda: all_slots_free(server.engine))


async def test_commands_are_served_while_the_model_thread_is_always_busy(start_server):
    """The serial baseline admits past capacity, so once it falls behind there is always a step
    ready to run. Controls, closes and new sessions are commands to the model thread: they must
    be applied between steps, not only when the model thread runs out of work."""
    engine = tiny_engine(scheduler="serial", max_sessions=4)
    real = engine.model.denoise

    def slow_denoise(x, t, cond, cache):
        time.sleep(0.02)  # 4 sessions x 4 steps x 20 ms > the 250 ms chunk period: always behind
        return real(x, t, cond, cache)

    engine.model.denoise = slow_denoise  # type: ignore[method-assign]
    server = await start_server(engine)
    misses = metrics.DEADLINE_MISSES._value.get()
    streams = [await connect(server.url, "ws", prompt="a red ball on grass", seed=i) for i in range(4)]
    for stream in streams:
        await next_frame(stream)
    await wait_until(lambda: metrics.DEADLINE_MISSES._value.get() > misses)  # behind, and staying behind
    for stream in streams:
        assert (await stream.action("left"))["type"] == "action"
    await streams[0].close()
    await wait_until(lambda: engine.pool.free_slots == 1)
    streams[0] = await connect(server.url, "ws", prompt="a blue square on sea", seed=9)
    await next_frame(streams[0])
    for stream in streams:
        await stream.close()
    await wait_until(lambda: all_slots_free(engine))
