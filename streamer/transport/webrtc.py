"""WebRTC signaling: `POST /v1/webrtc/offer` (JSON), trickle/DELETE, and WHEP (`/v1/whep`).

aiortc gathers all its candidates before it answers, so answers are complete (no server-side
trickle). Clients may still trickle theirs: `PATCH /v1/webrtc/{id}` (JSON) or
`PATCH /v1/whep/{id}` (`application/trickle-ice-sdpfrag`) adds them; mDNS (`.local`) candidates
and candidates that arrive after ICE completed are accepted and ignored.

Errors are JSON: `{"type": "error", "code", "field", "message"}` with 400 (bad JSON, field or
SDP), 403 (token), 404 (no such session), 415 (content type); a refusal by admission is 503
`{"type": "refused", "reason", "queue_position"}` with `Retry-After`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Literal, ParamSpec

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streamer.events import Refused
from streamer.protocol import ProtocolError, RefusedEvent, StartMessage, parse_json_object, validation_error
from streamer.transport.context import TransportContext
from streamer.transport.peer import PeerSession
from streamer.transport.registry import Unauthorized
from streamer.transport.sdp import CandidateInit, SdpError, parse_sdpfrag

log = logging.getLogger(__name__)
router = APIRouter()
_P = ParamSpec("_P")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class VideoOptions(_Body):
    codec: Literal["h264", "vp8"] | None = None


class OfferRequest(_Body):
    sdp: str
    type: Literal["offer"]
    start: StartMessage = Field(default_factory=StartMessage)
    video: VideoOptions = Field(default_factory=VideoOptions)


class CandidateModel(_Body):
    candidate: str = Field(max_length=1024)
    sdpMid: str | None = None
    sdpMLineIndex: int | None = None
    usernameFragment: str | None = None


class PatchRequest(_Body):
    token: str = Field(max_length=256)
    candidates: list[CandidateModel] = Field(max_length=64)


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def response(self) -> JSONResponse:
        body = {"type": "error", "code": self.code, "field": self.field, "message": self.message}
        return JSONResponse(body, status_code=self.status)


def _error_responses(route: Callable[_P, Awaitable[Response]]) -> Callable[_P, Awaitable[Response]]:
    """The one error mapping of every route here: an `HttpError` becomes its JSON error, a refusal
    by admission (offers only) the 503 `refused` event with Retry-After."""

    @functools.wraps(route)  # FastAPI reads the route's own signature through __wrapped__
    async def answer(*args: _P.args, **kwargs: _P.kwargs) -> Response:
        try:
            return await route(*args, **kwargs)
        except HttpError as exc:
            return exc.response()
        except Refused as exc:
            body = RefusedEvent(reason=exc.reason, queue_position=exc.queue_position).model_dump()
            return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})

    return answer


def _invalid(exc: ValidationError) -> HttpError:
    err = validation_error(exc, strip_tag=False)
    return HttpError(400, err.code, err.message, err.field)


def _require_media_type(request: Request, media_type: str, message: str) -> None:
    if request.headers.get("content-type", "").split(";")[0].strip() != media_type:
        raise HttpError(415, "unsupported_media_type", message)


def _ctx(request: Request) -> TransportContext:
    return request.app.state.ctx


async def _json_body(request: Request, model: type[_Body]) -> _Body:
    try:
        return model.model_validate(parse_json_object(await request.body()))
    except ProtocolError as exc:
        raise HttpError(413 if exc.code == "too_large" else 400, exc.code, exc.message, exc.field) from None
    except ValidationError as exc:
        raise _invalid(exc) from None


async def _open_peer(
    ctx: TransportContext, sdp: object, start: StartMessage, codec: str | None
) -> PeerSession:
    if ctx.draining:
        raise Refused("server is shutting down")
    peer = PeerSession(ctx)
    try:
        await peer.negotiate(sdp, start, codec)
    except SdpError as exc:
        await peer.close("invalid offer")
        raise HttpError(400, "invalid_sdp", str(exc), exc.field) from None
    except Refused:
        await peer.close("refused")
        raise
    except Exception:
        log.exception("webrtc negotiation failed")
        await peer.close("negotiation failed")
        raise HttpError(500, "internal", "negotiation failed") from None
    assert peer.session is not None
    ctx.peers[peer.session.id] = peer
    return peer


def _peer(ctx: TransportContext, session_id: str, token: str | None) -> PeerSession:
    """The peer of `session_id`; with a token, only if it matches."""
    if token is not None:
        try:
            ctx.registry.authorize(session_id, token)
        except Unauthorized as exc:
            raise HttpError(403, "unauthorized", str(exc), "token") from None
    peer = ctx.peers.get(session_id)
    if peer is None:
        raise HttpError(404, "not_found", "no WebRTC session with that id")
    return peer


async def _add_candidates(peer: PeerSession, inits: list[CandidateInit]) -> tuple[int, int]:
    try:
        return await peer.add_candidates(inits)
    except SdpError as exc:
        raise HttpError(400, "invalid_candidate", str(exc), exc.field) from None


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else request.query_params.get("token")


@router.post("/v1/webrtc/offer")
@_error_responses
async def offer(request: Request) -> Response:
    req = await _json_body(request, OfferRequest)
    assert isinstance(req, OfferRequest)
    peer = await _open_peer(_ctx(request), req.sdp, req.start, req.video.codec)
    h = peer.session.handle  # type: ignore[union-attr]
    answer = {
        "sdp": peer.pc.localDescription.sdp, "type": "answer", "session_id": h.id, "token": h.token,
        "fps": h.fps, "frames_per_chunk": h.frames_per_chunk, "width": h.width, "height": h.height,
        "codec": peer.codec,
    }  # fmt: skip
    return JSONResponse(answer)


@router.patch("/v1/webrtc/{session_id}")
@_error_responses
async def patch_candidates(session_id: str, request: Request) -> Response:
    req = await _json_body(request, PatchRequest)
    assert isinstance(req, PatchRequest)
    peer = _peer(_ctx(request), session_id, req.token)
    inits = [CandidateInit(c.candidate, c.sdpMid, c.sdpMLineIndex) for c in req.candidates]
    added, ignored = await _add_candidates(peer, inits)
    return JSONResponse({"added": added, "ignored": ignored})


@router.delete("/v1/webrtc/{session_id}")
@_error_responses
async def delete_peer(session_id: str, request: Request) -> Response:
    peer = _peer(_ctx(request), session_id, _bearer(request) or "")
    await peer.close("deleted by client")
    return JSONResponse({"ended": session_id})


# ---- WHEP (draft-ietf-wish-whep): start parameters come from the query string ----


def _whep_start(request: Request) -> tuple[StartMessage, str | None]:
    params = dict(request.query_params)
    codec = params.pop("codec", None)
    if codec not in (None, "h264", "vp8"):
        raise HttpError(400, "invalid_field", "codec must be h264 or vp8", "codec")
    values: dict[str, object] = dict(params)
    for key in ("seed", "steps"):
        if key in values and str(values[key]).isdigit():
            values[key] = int(str(values[key]))
    try:
        return StartMessage.model_validate(values), codec
    except ValidationError as exc:
        raise _invalid(exc) from None


@router.post("/v1/whep")
@_error_responses
async def whep_post(request: Request) -> Response:
    _require_media_type(request, "application/sdp", "POST an SDP offer as application/sdp")
    start, codec = _whep_start(request)
    try:
        sdp = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "invalid_sdp", "the body is not UTF-8", "sdp") from None
    peer = await _open_peer(_ctx(request), sdp, start, codec)
    h = peer.session.handle  # type: ignore[union-attr]
    headers = {
        "Location": f"/v1/whep/{h.id}",
        "X-Streamer-Session-Id": h.id,
        "X-Streamer-Token": h.token,
        "Access-Control-Expose-Headers": "Location, X-Streamer-Session-Id, X-Streamer-Token",
    }
    return Response(peer.pc.localDescription.sdp, 201, headers, media_type="application/sdp")


@router.patch("/v1/whep/{session_id}")
@_error_responses
async def whep_patch(session_id: str, request: Request) -> Response:
    _require_media_type(request, "application/trickle-ice-sdpfrag", "PATCH application/trickle-ice-sdpfrag")
    peer = _peer(_ctx(request), session_id, None)
    body = await request.body()
    await _add_candidates(peer, parse_sdpfrag(body.decode("utf-8", "replace")[:65536]))
    return Response(status_code=204)


@router.delete("/v1/whep/{session_id}")
@_error_responses
async def whep_delete(session_id: str, request: Request) -> Response:
    """The resource URL is the capability (WHEP): session ids are random UUIDs, never listed."""
    peer = _peer(_ctx(request), session_id, None)
    await peer.close("whep delete")
    return Response(status_code=200)
