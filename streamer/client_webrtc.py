"""The WebRTC half of `streamer.client`: an aiortc peer that receives the video track and uses the
`control` data channel for the same JSON messages as the WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from streamer.client import Frame, StreamClient, StreamError


def _to_rgb(video: VideoFrame) -> np.ndarray:
    return video.to_ndarray(format="rgb24")  # (H, W, 3) uint8


class WebRtcStreamClient(StreamClient):
    transport = "webrtc"

    def __init__(self, url: str, start: dict, codec: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.url = url.rstrip("/")
        self.start = start
        self.codec = codec
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = self.pc.createDataChannel("control")
        self._open = asyncio.Event()
        self._chunk: dict | None = None  # latest `chunk` event not yet matched to a frame
        self.channel.on("open", self._open.set)
        self.channel.on("message", lambda raw: self._on_message(raw))
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_state)

    async def connect(self) -> WebRtcStreamClient:
        self.pc.addTransceiver("video", direction="recvonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        body = {"sdp": self.pc.localDescription.sdp, "type": "offer", "start": self.start}
        if self.codec:
            body["video"] = {"codec": self.codec}
        async with httpx.AsyncClient(timeout=self.open_timeout_s) as http:
            response = await http.post(f"{self.url}/v1/webrtc/offer", json=body)
        answer = response.json()
        if response.status_code != 200:
            await self.pc.close()
            raise StreamError(f"offer {response.status_code}: {answer}", answer)
        self.session = answer
        await self.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        async with asyncio.timeout(self.open_timeout_s):
            await self._open.wait()
        return self

    def _on_message(self, raw: str | bytes) -> None:
        event = json.loads(raw)
        if event.get("type") == "chunk":
            self._chunk = event
        self._on_event(event)

    def _on_track(self, track) -> None:
        if track.kind == "video":
            self._spawn(self._read(track))

    async def _read(self, track) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                video = await track.recv()
                image = await loop.run_in_executor(None, _to_rgb, video)
                chunk, self._chunk = self._chunk, None
                self._push_frame(
                    Frame(
                        image,
                        time.time(),
                        chunk["capture_ts"] if chunk else None,
                        chunk["chunk_index"] if chunk else None,
                        chunk["first_frame"] if chunk else None,
                        chunk is not None,
                    )
                )
        except MediaStreamError:
            self._finish({"type": "ended", "reason": "video track ended"})

    async def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self._finish({"type": "ended", "reason": f"connection {self.pc.connectionState}"})

    async def send(self, message: dict) -> None:
        if self.ended is not None:
            raise StreamError(f"stream ended: {self.ended}", self.ended)
        await self._open.wait()
        self.channel.send(json.dumps(message))

    async def close(self) -> None:
        if self.ended is None and self.channel.readyState == "open":
            with contextlib.suppress(Exception):
                self.channel.send(json.dumps({"type": "stop"}))
                async with asyncio.timeout(2):
                    await self.ended_event.wait()
        for task in list(self._tasks):
            task.cancel()
        await self.pc.close()
        self._finish({"type": "ended", "reason": "closed by client"})
