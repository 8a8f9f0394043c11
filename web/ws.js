// WebSocket transport (`GET /v1/stream`): JSON control messages and events on one socket,
// binary chunk messages drawn to a canvas by `CanvasPlayer`.
//
// Handlers (shared with webrtc.js, so app.js treats both transports alike):
//   onEvent(event)   every JSON event from the server (admitted, refused, acks, error, ended...)
//   onChunk(info)    a chunk arrived: {chunkIndex, frames, captureTs}
//   onFrame(info)    a frame was displayed (see CanvasPlayer)
//   onDrop(n)        frames the client decoded but skipped
//   onClosed(info)   the connection is gone: {code, reason, clean}

import { CanvasPlayer } from "./canvas_player.js";
import { ChunkError, parseChunk, startMessage, stopMessage } from "./protocol.js";

export class WsTransport {
  constructor(canvas, handlers) {
    this.kind = "ws";
    this.canvas = canvas;
    this.handlers = handlers;
    this.ws = null;
    this.player = null;
    this.closedReported = false;
  }

  get element() {
    return this.canvas;
  }

  start(opts) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${scheme}//${location.host}/v1/stream`);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    this.player = new CanvasPlayer(this.canvas, {
      onFrame: (f) => this.handlers.onFrame(f),
      onDrop: (n) => this.handlers.onDrop(n),
      onError: (message) => this.handlers.onEvent({ type: "error", code: "client_decode", field: null, message }),
    });
    ws.onopen = () => this.send(startMessage(opts));
    ws.onmessage = (e) => this.receive(e.data);
    ws.onclose = (e) => this.reportClosed({ code: e.code, reason: e.reason, clean: e.wasClean });
  }

  receive(data) {
    if (typeof data === "string") {
      let event;
      try {
        event = JSON.parse(data);
      } catch {
        return;
      }
      this.handlers.onEvent(event);
      return;
    }
    let chunk;
    try {
      chunk = parseChunk(data);
    } catch (err) {
      if (!(err instanceof ChunkError)) throw err;
      this.handlers.onEvent({ type: "error", code: "client_chunk", field: null, message: err.message });
      return;
    }
    this.handlers.onChunk({ chunkIndex: chunk.chunkIndex, frames: chunk.frameCount, captureTs: chunk.captureTs });
    this.player.push(chunk);
  }

  /** Send a control message; false if the socket is not open. */
  send(msg) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(msg));
    this.handlers.onSent?.(msg);
    return true;
  }

  /** Ask the server to end the session (it answers `ended`, then closes with 1000). */
  stop() {
    if (!this.send(stopMessage())) this.close();
  }

  close() {
    this.player?.close();
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "client closed");
    this.reportClosed({ code: 1000, reason: "client closed", clean: true });
  }

  reportClosed(info) {
    if (this.closedReported) return;
    this.closedReported = true;
    this.player?.close();
    this.handlers.onClosed(info);
  }

  async rtcStats() {
    return null;
  }
}
