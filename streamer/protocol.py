"""Wire protocol v1: pydantic models of every JSON message, and the strict control parser.

Client -> server messages are a discriminated union on `type` (`ClientMessage`); the subset the
engine applies is `ControlMessage`. Server -> client events are the `*Event` models. Every model
forbids unknown fields and is strict (no "5" for 5), so the JSON schemas generated from them
(`python -m streamer.protocol --markdown`, `streamer protocol-schema`) are the contract.
The binary chunk layout lives in `streamer/transport/chunk_codec.py`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024  # larger WebSocket messages are answered with close code 1009
MAX_PROMPT_CHARS = 500
MAX_JSON_DEPTH = 8  # messages are flat; anything deeper is rejected before validation

MsgId = Annotated[str, Field(max_length=64)] | int | None


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: MsgId = Field(default=None, description="Optional; echoed in the ack or error it causes.")


# ---- client -> server -------------------------------------------------------------------------


class StartMessage(_Message):
    """First message on a WebSocket: start a new session (WebRTC sends these fields in the offer)."""

    type: Literal["start"] = "start"
    prompt: str = Field(default="", max_length=MAX_PROMPT_CHARS)
    scene: Literal["story", "game", "avatar"] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    steps: int | None = Field(default=None, ge=1, le=8, description="Denoising steps per chunk.")
    encoding: Literal["jpeg", "rgb"] = Field(default="jpeg", description="Binary frame encoding (WebSocket).")
    quality: int = Field(default=80, ge=1, le=100, description="JPEG quality.")
    protocol: int | None = Field(default=None, description=f"If set, must be {PROTOCOL_VERSION}.")


class AttachMessage(_Message):
    """Alternative first message: control an existing session with its token (no video)."""

    type: Literal["attach"] = "attach"
    session_id: str = Field(max_length=64)
    token: str = Field(max_length=256)


class PromptMessage(_Message):
    """Redirect the stream to a new prompt from the next chunk on."""

    type: Literal["prompt"] = "prompt"
    prompt: str = Field(max_length=MAX_PROMPT_CHARS)
    transition: Literal["cut", "blend", "recache"] = "blend"


class ActionMessage(_Message):
    """Game key state, applied from the next chunk on."""

    type: Literal["action"] = "action"
    action: Literal["none", "left", "right", "up", "down"]


class ControlValuesMessage(_Message):
    """Avatar controls in [0, 1]; at least one of them."""

    type: Literal["control"] = "control"
    mouth: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    eyes: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_value(self) -> ControlValuesMessage:
        if self.mouth is None and self.eyes is None:
            raise ValueError("mouth: give mouth, eyes or both")
        return self


class SeedMessage(_Message):
    type: Literal["seed"] = "seed"
    seed: int = Field(ge=0, lt=2**63)


class PauseMessage(_Message):
    type: Literal["pause"] = "pause"


class ResumeMessage(_Message):
    type: Literal["resume"] = "resume"


class StopMessage(_Message):
    """End the session; the server answers with `ended` and closes the connection."""

    type: Literal["stop"] = "stop"


class PingMessage(_Message):
    type: Literal["ping"] = "ping"
    t: float = Field(allow_inf_nan=False, description="Client clock; echoed in pong.")


ControlMessage = (
    PromptMessage | ActionMessage | ControlValuesMessage | SeedMessage | PauseMessage | ResumeMessage
)
ClientMessage = Annotated[
    StartMessage | AttachMessage | ControlMessage | StopMessage | PingMessage,
    Field(discriminator="type"),
]
CLIENT_MESSAGES: tuple[type[_Message], ...] = (
    StartMessage, AttachMessage, PromptMessage, ActionMessage, ControlValuesMessage,
    SeedMessage, PauseMessage, ResumeMessage, StopMessage, PingMessage,
)  # fmt: skip
ENGINE_CONTROL_TYPES = frozenset({"prompt", "action", "control", "seed", "pause", "resume"})
_CLIENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ClientMessage)

# ---- server -> client -------------------------------------------------------------------------


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Each event narrows this to its own Literal. Declared here so that `type` stays the first
    # key of every event, ahead of the fields the bases below share.
    type: str


class _Reply(_Event):
    """An event that may answer a client message: it echoes that message's `id`."""

    id: MsgId = None


class _SessionInfo(_Event):
    """The session a connection now streams or controls, and its stream's shape."""

    session_id: str
    fps: float
    frames_per_chunk: int
    width: int
    height: int


class _ChunkTiming(_Event):
    chunk_index: int
    capture_ts: float = Field(description="Unix seconds when the engine finished the chunk.")


class AdmittedEvent(_SessionInfo):
    type: Literal["admitted"] = "admitted"
    token: str = Field(description="Secret: lets another connection `attach` and control the session.")
    protocol: int = PROTOCOL_VERSION


class AttachedEvent(_SessionInfo):
    """Answer to a good `attach`: this connection may now control the session."""

    type: Literal["attached"] = "attached"


class RefusedEvent(_Event):
    type: Literal["refused"] = "refused"
    reason: str
    queue_position: int | None = None


class QueuedEvent(_Event):
    type: Literal["queued"] = "queued"
    position: int


class StartedEvent(_ChunkTiming):
    """Sent just before the first chunk (WebSocket) or first video frame (WebRTC)."""

    type: Literal["started"] = "started"


class ChunkEvent(_ChunkTiming):
    """WebRTC data channel only: the chunk whose first frame the video track is sending now."""

    type: Literal["chunk"] = "chunk"
    first_frame: int
    frames: int


class ControlAckEvent(_Reply):
    """Ack of an applied control message: `type` is the control message's type, plus engine fields."""

    model_config = ConfigDict(extra="allow")
    type: Literal["prompt", "action", "control", "seed", "pause", "resume"]
    unknown_words: list[str] | None = Field(default=None, description="prompt acks: words ignored.")
    applies_from_chunk: int | None = None


class ErrorEvent(_Reply):
    type: Literal["error"] = "error"
    code: str
    field: str | None = Field(default=None, description="Dotted path of the offending field.")
    message: str


class StatsEvent(_Event):
    model_config = ConfigDict(extra="allow")
    type: Literal["stats"] = "stats"
    source: Literal["transport", "engine"] = "engine"


class PongEvent(_Reply):
    type: Literal["pong"] = "pong"
    t: float
    server_ts: float


class EndedEvent(_Event):
    type: Literal["ended"] = "ended"
    reason: str


SERVER_EVENTS: tuple[type[_Event], ...] = (
    AdmittedEvent, AttachedEvent, RefusedEvent, QueuedEvent, StartedEvent, ChunkEvent, ControlAckEvent,
    ErrorEvent, StatsEvent, PongEvent, EndedEvent,
)  # fmt: skip


def dump_event(event: dict) -> str:
    """An event as a JSON text message (numpy scalars and other odd engine values made plain)."""

    def plain(value: object) -> object:
        item = getattr(value, "item", None)
        return item() if callable(item) else str(value)

    return json.dumps(event, default=plain)


# ---- parsing ----------------------------------------------------------------------------------


class ProtocolError(Exception):
    """A client message was rejected. `code` is from the table in docs/protocol.md."""

    def __init__(self, code: str, message: str, field: str | None = None, msg_id: Any = None):
        super().__init__(message)
        self.code, self.message, self.field, self.msg_id = code, message, field, msg_id

    def event(self) -> dict:
        return ErrorEvent(code=self.code, field=self.field, message=self.message, id=self.msg_id).model_dump()


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of parsed JSON, stopping once past `limit`."""
    if limit < 0 or not isinstance(value, dict | list):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(v, limit - 1) for v in items), default=0)


def parse_json_object(raw: str | bytes, limit: int = MAX_MESSAGE_BYTES) -> dict:
    """Decode one JSON object with the size and depth limits; raises `ProtocolError` only."""
    if len(raw) > limit:
        raise ProtocolError("too_large", f"message is {len(raw)} bytes, limit {limit}")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        value = json.loads(text)
    except RecursionError:
        raise ProtocolError("too_deep", f"JSON nested deeper than {MAX_JSON_DEPTH}") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise ProtocolError("invalid_json", f"not valid UTF-8 JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("not_object", f"expected a JSON object, got {type(value).__name__}")
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise ProtocolError("too_deep", f"JSON nested deeper than {MAX_JSON_DEPTH}")
    return value


_ERROR_CODES = {"missing": "missing_field", "extra_forbidden": "unknown_field", "string_too_long": "too_long"}


def validation_error(exc: ValidationError, msg_id: Any = None, strip_tag: bool = True) -> ProtocolError:
    """The first pydantic error as a `ProtocolError` naming its field."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return ProtocolError("unknown_type", err["msg"], "type", msg_id)
    field = ".".join(loc[1:] if strip_tag else loc) or None
    message = err["msg"]
    if field is None and err["type"] == "value_error":  # model validators name the field "name: ..."
        head, _, rest = str(err.get("ctx", {}).get("error", "")).partition(": ")
        if head.isidentifier() and rest:
            field, message = head, rest
    return ProtocolError(_ERROR_CODES.get(err["type"], "invalid_field"), message, field, msg_id)


def parse_control(raw: str | bytes) -> ClientMessage:
    """Parse one client message. Raises `ProtocolError` (and nothing else) when it is invalid."""
    value = parse_json_object(raw)
    raw_id = value.get("id")
    msg_id = raw_id if isinstance(raw_id, int) or (isinstance(raw_id, str) and len(raw_id) <= 64) else None
    if not isinstance(value.get("type"), str):
        raise ProtocolError("unknown_type" if "type" in value else "missing_field",
                            "`type` must be a message type string", "type", msg_id)  # fmt: skip
    try:
        msg = _CLIENT_ADAPTER.validate_python(value)
    except ValidationError as exc:
        raise validation_error(exc, msg_id) from None
    if isinstance(msg, StartMessage) and msg.protocol not in (None, PROTOCOL_VERSION):
        raise ProtocolError("unsupported_version", f"server speaks protocol {PROTOCOL_VERSION}",
                            "protocol", msg_id)  # fmt: skip
    return msg


if __name__ == "__main__":
    from streamer.protocol_schema import main

    raise SystemExit(main())
