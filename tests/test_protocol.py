"""Protocol models, the strict parser (with a hypothesis fuzz), the chunk codec and the doc sync.

`STREAMER_FUZZ_EXAMPLES=5000 pytest tests/test_protocol.py` runs a longer fuzz than CI's.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamer.events import Chunk
from streamer.protocol import (
    MAX_MESSAGE_BYTES,
    ActionMessage,
    ControlValuesMessage,
    PromptMessage,
    ProtocolError,
    StartMessage,
    parse_control,
)
from streamer.protocol_schema import markdown, schemas
from streamer.transport.chunk_codec import HEADER_SIZE, ChunkDecodeError, decode_chunk, encode_chunk

FUZZ = int(os.environ.get("STREAMER_FUZZ_EXAMPLES", "300"))
DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"


def test_valid_messages_parse():
    assert parse_control('{"type": "start"}') == StartMessage()
    msg = parse_control(b'{"type": "prompt", "prompt": "a red ball", "transition": "cut", "id": "p1"}')
    assert msg == PromptMessage(prompt="a red ball", transition="cut", id="p1")
    assert parse_control('{"type": "action", "action": "left"}') == ActionMessage(action="left")
    assert parse_control('{"type": "control", "mouth": 1}').mouth == 1.0  # an int is a number
    assert isinstance(parse_control('{"type": "control", "eyes": 0.2}'), ControlValuesMessage)


@pytest.mark.parametrize(
    ("raw", "code", "field"),
    [
        ("", "invalid_json", None),
        ("null", "not_object", None),
        ('{"type": "prompt"}', "missing_field", "prompt"),
        ('{"type": "prompt", "prompt": 5}', "invalid_field", "prompt"),
        ('{"type": "start", "steps": 0}', "invalid_field", "steps"),
        ('{"type": "start", "encoding": "png"}', "invalid_field", "encoding"),
        ('{"type": "start", "protocol": 2}', "unsupported_version", "protocol"),
        ('{"type": "control"}', "invalid_field", "mouth"),
        ('{"type": "seed", "seed": 1' + "0" * 5000 + "}", "invalid_json", None),
        ("x" * (MAX_MESSAGE_BYTES + 1), "too_large", None),
    ],
)
def test_invalid_messages_name_code_and_field(raw, code, field):
    with pytest.raises(ProtocolError) as info:
        parse_control(raw)
    assert (info.value.code, info.value.field) == (code, field)
    event = info.value.event()
    assert event["type"] == "error" and event["message"]


def test_error_echoes_the_message_id():
    with pytest.raises(ProtocolError) as info:
        parse_control('{"type": "seed", "seed": "x", "id": 42}')
    assert info.value.event()["id"] == 42


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=30,
)
types = st.sampled_from(["start", "attach", "prompt", "action", "control", "seed", "pause", "resume",
                         "stop", "ping", "x", ""]) | st.text(max_size=10)  # fmt: skip
fields = st.sampled_from(["prompt", "scene", "seed", "steps", "encoding", "quality", "transition", "action",
                          "mouth", "eyes", "t", "id", "session_id", "token", "protocol"])  # fmt: skip
messages = st.builds(lambda t, d: {"type": t, **d}, types | json_values, st.dictionaries(fields, json_values))


def _check(raw: str | bytes) -> None:
    try:
        parse_control(raw)
    except ProtocolError as exc:
        json.dumps(exc.event())  # the error itself is always sendable


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=list(HealthCheck))
@given(messages)
def test_fuzz_structured_messages(value):
    _check(json.dumps(value))


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300) | st.text(max_size=300))
def test_fuzz_garbage(raw):
    _check(raw)


@settings(max_examples=max(20, FUZZ // 10), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 70000), st.sampled_from(["[", '{"a":', "[{", '{"type":"prompt","prompt":[']))
def test_fuzz_deep_nesting(depth, opener):
    _check(opener * depth)


def _chunk(frames: np.ndarray) -> Chunk:
    return Chunk(str(uuid.uuid4()), 7, 28, frames, time.time(), 12.5)


def test_chunk_codec_roundtrip_rgb_and_jpeg():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 16, 24, 3), dtype=np.uint8)
    chunk = _chunk(frames)
    raw = decode_chunk(encode_chunk(chunk, "rgb"))
    assert (raw.frames == frames).all()
    assert (raw.session_id, raw.chunk_index, raw.first_frame, raw.capture_ts, raw.fps) == (
        chunk.session_id, 7, 28, chunk.capture_ts, 12.5)  # fmt: skip
    solid = np.full((2, 16, 24, 3), (200, 40, 90), np.uint8)
    jpeg = decode_chunk(encode_chunk(_chunk(solid), "jpeg", 90))
    assert jpeg.encoding == "jpeg" and np.abs(jpeg.frames.astype(int) - solid).max() <= 6


def test_chunk_header_layout_is_as_documented():
    data = encode_chunk(_chunk(np.zeros((2, 4, 6, 3), np.uint8)), "rgb")
    assert HEADER_SIZE == 48 and data[:4] == b"STRM" and data[4] == 1 and data[5] == 1
    assert int.from_bytes(data[6:8], "little") == 2  # frames
    assert int.from_bytes(data[8:10], "little") == 6 and int.from_bytes(data[10:12], "little") == 4
    assert int.from_bytes(data[48:52], "little") == 4 * 6 * 3
    assert len(data) == 48 + 2 * (4 + 72)


@pytest.mark.parametrize("cut", [0, 10, 47, 50, 60])
def test_truncated_chunks_raise_decode_error(cut):
    data = encode_chunk(_chunk(np.zeros((2, 4, 6, 3), np.uint8)), "rgb")
    with pytest.raises(ChunkDecodeError):
        decode_chunk(data[:cut] if cut else b"XXXX" + data[4:])


def test_schemas_cover_every_message():
    s = schemas()
    assert set(s["client"]) == {"start", "attach", "prompt", "action", "control", "seed", "pause", "resume",
                                "stop", "ping"}  # fmt: skip
    assert {"admitted", "refused", "error", "ended", "stats", "pong", "chunk", "ack"} <= set(s["server"])
    assert s["client"]["start"]["additionalProperties"] is False


def test_protocol_doc_embeds_current_schemas():
    """docs/protocol.md is regenerated with `python -m streamer.protocol --write docs/protocol.md`."""
    assert markdown() in DOC.read_text()
