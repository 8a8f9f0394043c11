"""`PeerSession`: one WebRTC peer connection bound to one engine session.

It is the session's chunk sink: chunks go to a `ChunkVideoTrack`, events to the `control` data
channel (buffered until the channel opens). Messages on that channel go through the same
`ControlChannel` as the WebSocket's. The session ends (and the engine frees it) when the client
sends `stop` or DELETEs the resource, when the engine ends it, when ICE does not connect within
`ice_connect_timeout_s`, or when the connection fails: a peer that vanishes without a goodbye
is caught by ICE consent freshness (RFC 7675; aioice gives up after 6 missed checks, ~30 s).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, cast

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.codecs import h264, vpx

from streamer.events import Chunk
from streamer.protocol import ChunkEvent, EndedEvent, StartedEvent, StartMessage, dump_event
from streamer.transport.context import TransportContext
from streamer.transport.control_channel import ControlChannel
from streamer.transport.registry import TransportSession
from streamer.transport.sdp import CandidateInit, SdpError, check_offer, codec_preferences, to_ice_candidate
from streamer.transport.video_track import ChunkVideoTrack

log = logging.getLogger(__name__)
_MAX_PENDING_EVENTS = 256
_MAX_CHANNEL_BUFFER = 1 << 20  # bytes queued on the data channel before events are dropped


def configure_bitrate(start_bps: int, max_bps: int) -> None:
    """aiortc has no per-sender bitrate API: set its encoders' start and cap (process-wide)."""
    for module in cast(list[Any], [h264, vpx]):
        module.MAX_BITRATE = max(max_bps, module.MIN_BITRATE)
        module.DEFAULT_BITRATE = min(max(start_bps, module.MIN_BITRATE), module.MAX_BITRATE)


class PeerSession:
    def __init__(self, ctx: TransportContext) -> None:
        self.ctx = ctx
        servers = [RTCIceServer(urls=url) for url in ctx.settings.ice_servers]
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        self.session: TransportSession | None = None
        self.track: ChunkVideoTrack | None = None
        self.channel = None  # the "control" RTCDataChannel, once the client opens it
        self.control: ControlChannel | None = None
        self.codec = ""
        self.closed = False
        self._pending: deque[dict] = deque(maxlen=_MAX_PENDING_EVENTS)
        self._inbox: asyncio.Queue[str | bytes] = asyncio.Queue(_MAX_PENDING_EVENTS)
        self._consumer: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.pc.on("connectionstatechange", self._on_state)
        self.pc.on("datachannel", self._on_datachannel)

    # ---- signaling ----
    async def negotiate(self, offer_sdp: object, start: StartMessage, codec: str | None = None) -> str:
        """Apply the offer, open the engine session, return the answer SDP.

        Raises `SdpError` (nothing opened) or `events.Refused` (the peer connection is closed).
        """
        sdp = check_offer(offer_sdp)
        self.codec, prefs = codec_preferences(sdp, codec or self.ctx.settings.video_codec)
        # aiortc fixes an answer's codecs in setRemoteDescription: preferences set afterwards are
        # ignored (the offer's order wins), so the transceiver is made and preferred first; the
        # offer's video m-line then binds to it.
        self.pc.addTransceiver("video", direction="sendonly").setCodecPreferences(prefs)
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        except Exception as exc:  # aiortc raises ValueError, AssertionError, KeyError... on bad SDP
            raise SdpError(f"aiortc rejected the offer: {type(exc).__name__}: {exc}") from None
        video = next((t for t in self.pc.getTransceivers() if t.kind == "video" and t.mid is not None), None)
        if video is None:
            raise SdpError("the offer has no video m-line")
        self.session = await self.ctx.registry.open(start, self, "webrtc")
        h = self.session.handle
        self.track = ChunkVideoTrack(h.fps, h.frames_per_chunk, self._on_chunk_started)
        video.sender.replaceTrack(self.track)
        video.direction = "sendonly"
        self.control = ControlChannel(self.ctx.registry, "webrtc", self.on_event, session=self.session)
        answer = await self.pc.createAnswer()
        await self.pc.setLocalDescription(answer)
        self._spawn(self._connect_watchdog())
        return self.pc.localDescription.sdp

    async def add_candidates(self, candidates: list[CandidateInit]) -> tuple[int, int]:
        """Trickled remote candidates: (added, ignored). mDNS and late ones are ignored."""
        added = ignored = 0
        for init in candidates:
            candidate = to_ice_candidate(init)
            if candidate is None:
                ignored += 1
                continue
            try:
                await self.pc.addIceCandidate(candidate)
                added += 1
            except Exception as exc:  # aioice refuses candidates after ICE completed
                log.debug("candidate ignored: %s", exc)
                ignored += 1
        return added, ignored

    # ---- ChunkSink ----
    def on_chunk(self, chunk: Chunk) -> None:
        if self.track is not None:
            self.track.push(chunk)

    def on_event(self, event: dict) -> None:
        self._send(event)
        if event.get("type") == "ended":
            if self.session is not None:
                self.ctx.registry.forget(self.session.id)
            self._spawn(self.close(str(event.get("reason", "ended"))))

    # ---- data channel ----
    def _on_datachannel(self, channel) -> None:
        if channel.label != "control" or self.channel is not None:
            return
        self.channel = channel
        channel.on("message", self._on_message)
        self._consumer = self._spawn(self._consume())
        channel.on("open", self._flush)
        self._flush()

    def _flush(self) -> None:
        """Send the events that waited for the channel, in order."""
        while self._pending and self.channel is not None and self.channel.readyState == "open":
            self._write(self._pending.popleft())

    def _on_message(self, raw: str | bytes) -> None:
        try:
            self._inbox.put_nowait(raw)
        except asyncio.QueueFull:
            if self.control is not None:
                self.control.error("overloaded", "too many control messages in flight")

    async def _consume(self) -> None:
        """One message at a time, in order: a redirect never overtakes the action sent before it."""
        while not self.closed:
            raw = await self._inbox.get()
            if self.control is not None and not self.closed:
                await self.control.handle(raw)

    def _send(self, event: dict) -> None:
        self._pending.append(event)
        self._flush()

    def _write(self, event: dict) -> None:
        assert self.channel is not None
        if self.channel.bufferedAmount < _MAX_CHANNEL_BUFFER:  # a client not reading loses events
            self.channel.send(dump_event(event))

    def _on_chunk_started(self, chunk: Chunk) -> None:
        if self.track is not None and self.track.frames_sent == 0:
            self._send(StartedEvent(chunk_index=chunk.chunk_index, capture_ts=chunk.capture_ts).model_dump())
        event = ChunkEvent(
            chunk_index=chunk.chunk_index,
            first_frame=chunk.first_frame,
            frames=len(chunk.frames),
            capture_ts=chunk.capture_ts,
        )
        self._send(event.model_dump())

    # ---- lifecycle ----
    async def _on_state(self) -> None:
        state = self.pc.connectionState
        log.info("peer %s: %s", self.session.id if self.session else "-", state)
        if state in ("failed", "closed"):
            await self.close(f"connection {state}")

    async def _connect_watchdog(self) -> None:
        await asyncio.sleep(self.ctx.settings.ice_connect_timeout_s)
        if self.pc.connectionState != "connected" and not self.closed:
            await self.close("ice connect timeout")

    async def close(self, reason: str) -> None:
        """End the engine session and the peer connection (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self.session is not None:
            self.ctx.peers.pop(self.session.id, None)
            if not self.session.closed:
                self._send(EndedEvent(reason=reason).model_dump())
                await self.ctx.registry.close(self.session.id, reason)
        if self.track is not None:
            self.track.stop()
        if self._consumer is not None and self._consumer is not asyncio.current_task():
            self._consumer.cancel()
        await asyncio.sleep(0.05)  # let the data channel flush `ended`
        await self.pc.close()
        # Pending helpers (the connect watchdog sleeps 15 s) would keep this peer alive.
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
