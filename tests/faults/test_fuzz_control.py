"""Fuzzed control messages over one live WebSocket session on the real engine.

Hypothesis generates wrong types, huge strings, deep nesting, binary garbage and random JSON.
Each message gets the answer the protocol promises, worked out independently of the server by
`protocol.parse_control` (the oracle): an `error` with that code (and the message's `id`), an
ack when the message happens to be valid, or, over 64 KiB, `too_large` and close 1009 (then
the test starts a new session). Between messages the session must keep streaming.

A few hundred cases by default; `STREAMER_FUZZ_EXAMPLES=5000` for thousands.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from streamer.protocol import MAX_MESSAGE_BYTES, ProtocolError, parse_control
from tests.faults.conftest import ThreadedServer
from tests.transport.conftest import HANG_GUARD_S

EXAMPLES = int(os.environ.get("STREAMER_FUZZ_EXAMPLES", "300"))
CHECK_EVERY = 100  # messages between "still streaming?" checks

TYPES = (
    "start",
    "attach",
    "prompt",
    "action",
    "control",
    "seed",
    "pause",
    "resume",
    "stop",
    "ping",
    "teleport",
)
FIELDS = ("prompt", "transition", "action", "mouth", "eyes", "seed", "t", "session_id", "token", "scene",
          "steps", "encoding", "quality", "protocol", "id", "type", "extra")  # fmt: skip

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=12,
)  # fmt: skip
wrong_types = st.builds(lambda t, fields: json.dumps({"type": t, **fields}), st.sampled_from(TYPES),
                        st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=3))  # fmt: skip
huge_strings = st.builds(
    lambda t, f, ch, n: json.dumps({"type": t, f: ch * n}),
    st.sampled_from(TYPES), st.sampled_from(FIELDS), st.characters(), st.integers(400, 70_000),
)  # fmt: skip


# Messages of a real type whose fields are sometimes right, sometimes anything: acks, range
# errors, `too_long`, unknown `transition`s, bad `id`s.
FIELD_VALUES = {
    "prompt": {
        "prompt": st.text(max_size=600),
        "transition": st.sampled_from(["cut", "blend", "recache", "fade"]),
    },
    "action": {"action": st.sampled_from(["none", "left", "right", "up", "down", "jump"])},
    "control": {"mouth": st.floats(-0.5, 1.5), "eyes": st.floats(-0.5, 1.5)},
    "seed": {"seed": st.integers(-5, 2**64)},
    "ping": {"t": st.floats()},
    "resume": {},
}
near_valid = st.sampled_from(sorted(FIELD_VALUES)).flatmap(
    lambda t: st.fixed_dictionaries(
        {"type": st.just(t)},
        optional={**{k: v | json_values for k, v in FIELD_VALUES[t].items()},
                  "id": st.integers() | st.text(max_size=80) | json_values},
    )
).map(json.dumps)  # fmt: skip


def _nested(depth: int, bracket: str, inside: bool) -> str:
    body = "[" * depth + "]" * depth if bracket == "[" else '{"a": ' * depth + "1" + "}" * depth
    return '{"type": "prompt", "prompt": "a", "x": ' + body + "}" if inside else body


deep_nesting = st.builds(_nested, st.integers(7, 5000), st.sampled_from("[{"), st.booleans())
random_json = json_values.map(json.dumps)
garbage_text = st.text(max_size=300)
garbage_bytes = st.binary(max_size=3000)
texts = near_valid | wrong_types | huge_strings | deep_nesting | random_json | garbage_text
# (payload, sent as a binary frame?)
cases = st.tuples(texts, st.booleans()).map(lambda c: (c[0].encode() if c[1] else c[0], c[1])) | st.tuples(
    garbage_bytes, st.just(True)
)


def oracle(payload: str | bytes) -> tuple[str, object, object]:
    """What the server must answer: ("close" | "error" | "ack" | "pong" | "skip", code or type, id)."""
    size = len(payload.encode()) if isinstance(payload, str) else len(payload)
    if size > MAX_MESSAGE_BYTES:
        return "close", "too_large", None
    try:
        msg = parse_control(payload)
    except ProtocolError as exc:
        return "error", exc.code, exc.msg_id
    if msg.type in ("start", "attach"):
        return "error", "already_started", msg.id
    if msg.type == "resume":  # the session is streaming, not paused
        return "error", "invalid_state", msg.id
    if msg.type in ("pause", "stop"):
        return "skip", None, None  # valid and state-changing: not what this test is about
    if msg.type == "ping":
        return "pong", "pong", msg.id
    return "ack", msg.type, msg.id


class LiveSession:
    """One WebSocket session on the threaded server, driven synchronously."""

    START = {"type": "start", "prompt": "a red ball moving left on grass", "seed": 1}

    def __init__(self, server: ThreadedServer) -> None:
        self.server = server
        self.answers: Counter[str] = Counter()
        self.sessions: list[str] = []
        self.sent = 0
        self.connections = contextlib.ExitStack()
        self.open()

    def open(self) -> None:
        self.ws = self.connections.enter_context(
            connect(self.server.ws_url, max_size=None, open_timeout=HANG_GUARD_S)
        )
        self.ws.send(json.dumps(self.START))
        admitted = self.event()
        assert admitted["type"] == "admitted", admitted
        self.sessions.append(admitted["session_id"])
        self.assert_streaming()

    def event(self) -> dict:
        """The next event that answers something (chunks, `started` and `stats` are skipped)."""
        while True:
            message = self.ws.recv(timeout=HANG_GUARD_S)
            if isinstance(message, str):
                event = json.loads(message)
                if event["type"] not in ("started", "stats"):
                    return event

    def assert_streaming(self) -> None:
        self.ws.send(json.dumps({"type": "ping", "t": 1.0, "id": "alive"}))
        pong = self.event()
        assert pong["type"] == "pong" and pong["id"] == "alive", pong
        while not isinstance(self.ws.recv(timeout=HANG_GUARD_S), bytes):  # a chunk after the pong
            pass
        assert self.sessions[-1] in self.server.engine.sessions

    def check(self, payload: str | bytes) -> None:
        kind, expected, msg_id = oracle(payload)
        if kind == "skip":
            return
        self.ws.send(payload)
        reply = self.event()
        self.answers[f"{kind}:{expected}"] += 1
        detail = (payload[:200], reply)
        if kind == "pong":
            assert reply["type"] == "pong" and reply.get("id") == msg_id, detail
        elif kind == "ack":
            assert reply["type"] == expected and reply.get("id") == msg_id, detail
        else:
            assert reply["type"] == "error" and reply["code"] == expected and reply["message"], detail
            assert reply["id"] == msg_id, detail
        if kind == "close":
            try:
                while True:
                    self.ws.recv(timeout=HANG_GUARD_S)
            except ConnectionClosed:
                pass
            assert self.ws.close_code == 1009
            self.open()
        self.sent += 1
        if self.sent % CHECK_EVERY == 0:
            self.assert_streaming()


def test_fuzzed_control_messages_get_errors_and_the_session_streams_on(threaded_server):
    live = LiveSession(threaded_server)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def send(case: tuple[str | bytes, bool]) -> None:
        live.check(case[0])

    try:
        send()
        live.assert_streaming()
    finally:
        live.connections.close()
    assert httpx.get(f"{threaded_server.url}/healthz").status_code == 200
    print(
        f"\n{live.sent} fuzzed messages, {len(live.sessions) - 1} closed 1009 for size; answers: {dict(live.answers)}"
    )
