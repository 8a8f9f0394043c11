"""`create_app(engine, settings)`: the FastAPI app serving the client, probes, metrics and transports.

Routes: `GET /` (web/index.html, or a placeholder while web/ is empty) and web/'s static files,
`GET /healthz`, `GET /readyz`, `GET /metrics`, `GET /v1/info`, WebSocket `/v1/stream`
(`ws.py`), WebRTC signaling and WHEP (`webrtc.py`).

The lifespan starts the engine, and on shutdown closes every peer and ends every session
(`engine.stop()`, which sends each sink `ended`). `streamer serve` drains before uvicorn closes
the sockets, so clients see `ended` rather than a dropped connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles

from streamer import metrics
from streamer.engine_api import EngineAPI
from streamer.protocol import PROTOCOL_VERSION
from streamer.transport import webrtc, ws
from streamer.transport.context import TransportContext
from streamer.transport.peer import configure_bitrate
from streamer.transport.settings import ServerSettings

log = logging.getLogger(__name__)
_STOP_TIMEOUT_S = 10.0

PLACEHOLDER = """<!doctype html><html><head><meta charset="utf-8"><title>streamer</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>streamer</h1><p>The server is running, but the browser client is missing: <code>web/index.html</code>
is not there yet.</p><p>API: <a href="/v1/info">/v1/info</a>, <a href="/metrics">/metrics</a>,
WebSocket <code>/v1/stream</code>, WebRTC <code>POST /v1/webrtc/offer</code>, WHEP <code>POST /v1/whep</code>.
See docs/protocol.md.</p></body></html>"""


async def drain(ctx: TransportContext, reason: str = "shutdown") -> None:
    """End every session: the engine tells each sink `ended`, then peers close (idempotent)."""
    if ctx.draining:
        return
    ctx.draining = True
    try:
        async with asyncio.timeout(_STOP_TIMEOUT_S):
            await ctx.engine.stop()
    except TimeoutError:
        log.error("engine.stop() took over %.0fs", _STOP_TIMEOUT_S)
    except Exception:
        log.exception("engine.stop() failed")
    await asyncio.gather(*(peer.close(reason) for peer in list(ctx.peers.values())), return_exceptions=True)
    await ctx.registry.close_all(reason)


def create_app(engine: EngineAPI, settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or ServerSettings()
    ctx = TransportContext.create(engine, settings)
    configure_bitrate(settings.video_bitrate, settings.video_max_bitrate)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = getattr(engine, "start", None)
        if start is not None:
            await start()
        try:
            yield
        finally:
            await drain(ctx)
            ctx.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="streamer", version=str(PROTOCOL_VERSION), lifespan=lifespan, docs_url="/docs")
    app.state.ctx = ctx
    app.include_router(ws.router)
    app.include_router(webrtc.router)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        field = ".".join(str(p) for p in err["loc"][1:]) or None
        body = {"type": "error", "code": "invalid_field", "field": field, "message": err["msg"]}
        return JSONResponse(body, status_code=400)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        body = {"type": "error", "code": code, "field": None, "message": str(exc.detail)}
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        """200 once the engine is ready (the `streamer serve` contract), 503 before or if it died."""
        ok = engine.ready()
        return JSONResponse({"status": "ok" if ok else "not_ready"}, status_code=200 if ok else 503)

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready to admit sessions: engine ready and not draining."""
        ok = engine.ready() and not ctx.draining
        status = "ready" if ok else ("draining" if ctx.draining else "not_ready")
        return JSONResponse({"status": status}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/info")
    async def info() -> JSONResponse:
        body = dict(engine.info())
        body["protocol"] = PROTOCOL_VERSION
        body["transports"] = {
            "ws": "/v1/stream", "webrtc": "/v1/webrtc/offer", "whep": "/v1/whep",
            "codecs": ["h264", "vp8"], "default_codec": settings.video_codec,
        }  # fmt: skip
        return JSONResponse(body)

    index = settings.web_dir / "index.html"

    @app.get("/", include_in_schema=False)
    def root() -> Response:  # sync: FastAPI runs it in a thread, so the stat() is off the loop
        if index.is_file():
            return FileResponse(index)
        return HTMLResponse(PLACEHOLDER)

    if settings.web_dir.is_dir():
        app.mount("/", StaticFiles(directory=settings.web_dir), name="web")
    return app
