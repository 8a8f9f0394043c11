"""`streamer client`: stream N frames, optionally redirect/act on a schedule, save MP4, report latency.

The last line printed is one JSON object: `frames`, `ttff_s` (connect start -> first frame),
`interval_p50_s` / `interval_p99_s` / `interval_max_s` (frame intervals as a player shows them:
WebRTC frames on arrival, WebSocket chunks played out at the session fps, each frame at
max(arrival, previous + 1/fps)), `arrival_interval_p99_s` (raw arrival gaps),
`glass_to_glass_p50_s` / `_p99_s` (receive time of a chunk's first frame minus the engine's
capture timestamp; same-host clocks), `fps_delivered`, `frames_dropped` and `error` (null if OK).
The exit status is non-zero if fewer than N frames arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence

import numpy as np

from streamer.client import Frame, StreamClient, StreamError, connect


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    p.add_argument("--transport", choices=["ws", "webrtc"], default="ws")
    p.add_argument("--prompt", default="", help="start prompt")
    p.add_argument("--scene", choices=["story", "game", "avatar"])
    p.add_argument("--seed", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--encoding", choices=["jpeg", "rgb"], default="jpeg", help="WebSocket frame encoding")
    p.add_argument("--codec", choices=["h264", "vp8"], help="WebRTC video codec")
    p.add_argument("--frames", type=int, default=90, help="frames to receive")
    p.add_argument("--out", help="write the received video to this .mp4")
    p.add_argument("--redirect", action="append", default=[], metavar="SECONDS:PROMPT",
                   help="send a new prompt this many seconds after the first frame (repeatable)")  # fmt: skip
    p.add_argument("--action", action="append", default=[], metavar="SECONDS:ACTION",
                   help="send a game action this many seconds after the first frame (repeatable)")  # fmt: skip
    p.add_argument("--timeout", type=float, help="give up after this many seconds (default: from N and fps)")
    p.add_argument("--json", action="store_true", help="print only the JSON report")


def _schedule(items: list[str], kind: str) -> list[tuple[float, dict]]:
    out = []
    for item in items:
        at, _, value = item.partition(":")
        msg = {"type": "prompt", "prompt": value} if kind == "prompt" else {"type": "action", "action": value}
        out.append((float(at), msg))
    return sorted(out, key=lambda x: x[0])


async def _run_schedule(stream: StreamClient, plan: list[tuple[float, dict]], t0: float) -> None:
    for at, msg in plan:
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        await stream.request(msg)


def _pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 5) if values else None


def report(frames: list[Frame], t_connect: float, fps: float, transport: str) -> dict:
    """Latency figures of a received stream (see the module docstring)."""
    recv = [f.recv_ts for f in frames]
    arrival = list(np.diff(recv)) if len(recv) > 1 else []
    if transport == "ws" and fps > 0:
        shown = [recv[0]] if recv else []
        for t in recv[1:]:
            shown.append(max(t, shown[-1] + 1.0 / fps))
        intervals = list(np.diff(shown)) if len(shown) > 1 else []
    else:
        intervals = arrival
    g2g = [f.recv_ts - f.capture_ts for f in frames if f.first_in_chunk and f.capture_ts is not None]
    span = recv[-1] - recv[0] if len(recv) > 1 else 0.0
    return {
        "frames": len(frames),
        "ttff_s": round(recv[0] - t_connect, 5) if recv else None,
        "interval_p50_s": _pct(intervals, 50),
        "interval_p99_s": _pct(intervals, 99),
        "interval_max_s": round(max(intervals), 5) if intervals else None,
        "arrival_interval_p99_s": _pct(arrival, 99),
        "glass_to_glass_p50_s": _pct(g2g, 50),
        "glass_to_glass_p99_s": _pct(g2g, 99),
        "fps_delivered": round((len(recv) - 1) / span, 3) if span > 0 else None,
        "fps_session": fps,
    }


def write_mp4(path: str, images: list[np.ndarray], fps: float) -> None:
    """H.264 MP4 (blocking: run in an executor). Odd sizes are cropped to even for yuv420p."""
    import av

    h, w = (d - d % 2 for d in images[0].shape[:2])
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=max(1, round(fps)))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for image in images:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image[:h, :w]), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


async def run(args: argparse.Namespace) -> tuple[dict, int]:
    start = {k: getattr(args, k) for k in ("prompt", "scene", "seed", "steps", "encoding")}
    start = {k: v for k, v in start.items() if v is not None}
    if args.codec:
        start["codec"] = args.codec
    result: dict = {"transport": args.transport, "error": None}
    frames: list[Frame] = []
    if args.transport == "webrtc":
        import streamer.client_webrtc  # noqa: F401 - aiortc's import time is not the stream's TTFF
    t_wall = time.time()
    stream: StreamClient | None = None
    scheduler: asyncio.Task | None = None
    try:
        stream = await connect(args.url, args.transport, **start)
        fps = float(stream.session.get("fps") or 30.0)
        timeout = args.timeout or 15.0 + 3.0 * args.frames / fps
        plan = _schedule(args.redirect, "prompt") + _schedule(args.action, "action")
        async with asyncio.timeout(timeout):
            async for frame in stream.frames():
                if not frames and plan:
                    scheduler = asyncio.create_task(_run_schedule(stream, plan, time.monotonic()))
                frames.append(frame)
                if len(frames) >= args.frames:
                    break
        if scheduler is not None:
            await asyncio.wait_for(scheduler, timeout=10)
        if len(frames) < args.frames:
            result["error"] = f"stream ended after {len(frames)} frames: {stream.ended}"
    except TimeoutError:
        result["error"] = f"timed out after {len(frames)} frames"
    except (StreamError, OSError, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if stream is not None:
            await stream.close()
    fps = float(stream.session.get("fps") or 30.0) if stream else 30.0
    result.update(report(frames, t_wall, fps, args.transport))
    if stream is not None:
        result.update(session_id=stream.session.get("session_id"), frames_dropped=stream.frames_dropped)
    if args.out and frames:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, write_mp4, args.out, [f.image for f in frames], fps)
        result["out"] = args.out
    return result, 0 if result["error"] is None else 1


def main(args: argparse.Namespace) -> int:
    result, status = asyncio.run(run(args))
    if not args.json:
        for key, value in result.items():
            print(f"{key:>24}: {value}", file=sys.stderr)
    print(json.dumps(result), flush=True)
    return status
