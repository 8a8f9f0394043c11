// WebRTC transport (`POST /v1/webrtc/offer`): the server's video track plays in a <video>, and
// control messages and events travel on the `control` data channel.
//
// Signaling follows docs/protocol.md: a recvonly video transceiver and the `control` channel
// are created before the offer; the offer goes out once ICE gathering completes or settles
// (on a host with only loopback it never completes, so the wait is bounded); mDNS `.local`
// candidates are stripped (the server ignores them anyway); the answer holds all the server's
// candidates. Candidates found after the offer was sent are trickled with PATCH.
//
// Latency: the server sends a `chunk` event on the data channel as each chunk's first frame
// goes out. requestVideoFrameCallback tells when each frame was received and displayed; a frame
// belongs to the last chunk event that arrived before it, and its latency is display time minus
// that chunk's capture_ts (one clock on one host; across hosts it includes the clock offset).
//
// Handlers: the same as ws.js.

import { startFields, stopMessage } from "./protocol.js";

const GATHER_MAX_MS = 2000; // hard bound on waiting for ICE gathering
const GATHER_SETTLE_MS = 100; // after the last candidate, assume gathering is done
const RECEIVE_SLACK_MS = 3; // a chunk event may arrive a hair after its frame's packets

function stripMdns(sdp) {
  return sdp
    .split("\r\n")
    .filter((line) => !(line.startsWith("a=candidate:") && /\s\S+\.local\s/.test(line)))
    .join("\r\n");
}

function iceGathered(pc) {
  return new Promise((resolve) => {
    if (pc.iceGatheringState === "complete") return resolve();
    let settle = null;
    const done = () => {
      clearTimeout(hard);
      clearTimeout(settle);
      pc.removeEventListener("icegatheringstatechange", onState);
      pc.removeEventListener("icecandidate", onCandidate);
      resolve();
    };
    const hard = setTimeout(done, GATHER_MAX_MS);
    const onState = () => pc.iceGatheringState === "complete" && done();
    const onCandidate = (e) => {
      if (!e.candidate) return done();
      clearTimeout(settle);
      settle = setTimeout(done, GATHER_SETTLE_MS);
    };
    pc.addEventListener("icegatheringstatechange", onState);
    pc.addEventListener("icecandidate", onCandidate);
  });
}

// The offer lists `codec` first. aiortc answers with the offer's codec order and sends the
// first one, so this is what makes the requested codec the one on the wire.
function preferCodec(transceiver, codec) {
  if (!codec || !transceiver.setCodecPreferences || !RTCRtpReceiver.getCapabilities) return;
  const all = RTCRtpReceiver.getCapabilities("video")?.codecs || [];
  const mime = `video/${codec}`.toLowerCase();
  const first = all.filter((c) => c.mimeType.toLowerCase() === mime);
  if (!first.length) return;
  try {
    transceiver.setCodecPreferences([...first, ...all.filter((c) => c.mimeType.toLowerCase() !== mime)]);
  } catch {
    // a browser that rejects the list still negotiates with its own order
  }
}

async function errorOf(resp) {
  try {
    const body = await resp.json();
    return body && typeof body === "object" ? body : { message: String(body) };
  } catch {
    return { message: resp.statusText || `HTTP ${resp.status}` };
  }
}

export class WebRtcTransport {
  /**
   * @param codec "h264", "vp8", or "" for the server's default
   * @param defaultCodec the server's default (from /v1/info): a promise of "h264", "vp8" or ""
   */
  constructor(video, handlers, { codec = "", defaultCodec = Promise.resolve("") } = {}) {
    this.kind = "webrtc";
    this.video = video;
    this.handlers = handlers;
    this.codec = codec;
    this.defaultCodec = defaultCodec;
    this.pc = null;
    this.channel = null;
    this.session = null; // the offer answer: session_id, token, fps, ...
    this.marks = []; // recent chunk events: {arrival (performance.now), chunkIndex, captureTs}
    this.lastMark = null;
    this.lateCandidates = [];
    this.closedReported = false;
  }

  get element() {
    return this.video;
  }

  async start(opts) {
    try {
      await this.negotiate(opts);
    } catch (err) {
      if (this.closedReported) return;
      this.reportClosed({ code: null, reason: `WebRTC setup failed: ${err.message || err}`, clean: false });
    }
  }

  async negotiate(opts) {
    const pc = new RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    const video = pc.addTransceiver("video", { direction: "recvonly" });
    preferCodec(video, this.codec || (await this.defaultCodec));
    const channel = pc.createDataChannel("control");
    this.channel = channel;
    channel.onmessage = (e) => this.receive(e.data);
    channel.onclose = () => this.reportClosed({ code: null, reason: "control channel closed", clean: false });
    pc.ontrack = (e) => {
      this.video.srcObject = e.streams[0] || new MediaStream([e.track]);
      this.video.play().catch(() => {}); // muted autoplay needs no gesture; a refusal shows in stats
    };
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed") this.reportClosed({ code: null, reason: "connection failed", clean: false });
    };
    pc.addEventListener("icecandidate", (e) => this.trickle(e.candidate));

    await pc.setLocalDescription(await pc.createOffer());
    await iceGathered(pc);
    if (this.closedReported) return; // stopped while gathering
    this.offerSent = true;
    const body = { sdp: stripMdns(pc.localDescription.sdp), type: "offer", start: startFields(opts) };
    if (this.codec) body.video = { codec: this.codec };
    const resp = await fetch("/v1/webrtc/offer", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (resp.status === 503) {
      const refused = await errorOf(resp); // {"type": "refused", "reason", "queue_position"}
      this.handlers.onEvent({ type: "refused", reason: refused.reason || refused.message, queue_position: refused.queue_position ?? null });
      this.teardown();
      this.reportClosed({ code: 503, reason: "refused", clean: true });
      return;
    }
    if (!resp.ok) {
      const err = await errorOf(resp);
      const field = err.field ? ` (${err.field})` : "";
      throw new Error(`${resp.status} ${err.code || "error"}${field}: ${err.message}`);
    }
    const answer = await resp.json();
    this.session = answer;
    if (this.closedReported) {
      this.deleteSession(); // stopped while the offer was in flight: free the session now
      return;
    }
    await pc.setRemoteDescription({ type: "answer", sdp: answer.sdp });
    this.handlers.onEvent({
      type: "admitted", session_id: answer.session_id, token: answer.token, fps: answer.fps,
      frames_per_chunk: answer.frames_per_chunk, width: answer.width, height: answer.height,
      protocol: 1, codec: answer.codec,
    });
    this.flushTrickle();
    this.watchFrames();
  }

  trickle(candidate) {
    if (!this.offerSent || !candidate || !candidate.candidate) return;
    if (/\s\S+\.local\s/.test(candidate.candidate)) return;
    this.lateCandidates.push(candidate.toJSON());
    this.flushTrickle();
  }

  flushTrickle() {
    if (!this.session || !this.lateCandidates.length) return;
    const candidates = this.lateCandidates.splice(0);
    fetch(`/v1/webrtc/${this.session.session_id}`, {
      method: "PATCH",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: this.session.token, candidates }),
    }).catch(() => {}); // best effort: the offer already carried the candidates that matter
  }

  receive(data) {
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (event.type === "chunk") {
      this.marks.push({ arrival: performance.now(), chunkIndex: event.chunk_index, captureTs: event.capture_ts });
      if (this.marks.length > 64) this.marks.splice(0, this.marks.length - 64);
      this.handlers.onChunk({ chunkIndex: event.chunk_index, frames: event.frames, captureTs: event.capture_ts });
      if (!this.video.requestVideoFrameCallback) this.frameWithoutCallback(event);
    }
    this.handlers.onEvent(event);
  }

  watchFrames() {
    const video = this.video;
    if (!video.requestVideoFrameCallback) return;
    const onFrame = (now, meta) => {
      if (this.closedReported) return;
      this.frameShown(meta);
      video.requestVideoFrameCallback(onFrame);
    };
    video.requestVideoFrameCallback(onFrame);
  }

  frameShown(meta) {
    const received = meta.receiveTime ?? meta.presentationTime;
    let mark = null;
    for (let i = this.marks.length - 1; i >= 0; i--) {
      if (this.marks[i].arrival <= received + RECEIVE_SLACK_MS) {
        mark = this.marks[i];
        break;
      }
    }
    const firstOfChunk = mark !== null && mark !== this.lastMark;
    if (mark) this.lastMark = mark;
    this.handlers.onFrame({
      chunkIndex: mark ? mark.chunkIndex : null,
      frameIndex: meta.presentedFrames,
      firstOfChunk,
      captureTs: mark ? mark.captureTs : null,
      displayWallS: (performance.timeOrigin + meta.expectedDisplayTime) / 1000,
    });
  }

  // Without requestVideoFrameCallback (old browsers) the chunk event's arrival stands in for
  // display: a lower bound on the latency.
  frameWithoutCallback(event) {
    this.handlers.onFrame({
      chunkIndex: event.chunk_index, frameIndex: event.first_frame, firstOfChunk: true,
      captureTs: event.capture_ts, displayWallS: (performance.timeOrigin + performance.now()) / 1000,
    });
  }

  send(msg) {
    if (!this.channel || this.channel.readyState !== "open") return false;
    this.channel.send(JSON.stringify(msg));
    this.handlers.onSent?.(msg);
    return true;
  }

  /** End the session: `stop` on the channel (the server answers `ended`), else DELETE. */
  stop() {
    if (this.send(stopMessage())) return;
    this.deleteSession();
    this.close();
  }

  deleteSession(keepalive = false) {
    if (!this.session) return;
    fetch(`/v1/webrtc/${this.session.session_id}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${this.session.token}` },
      keepalive,
    }).catch(() => {});
  }

  close() {
    this.teardown();
    this.reportClosed({ code: null, reason: "client closed", clean: true });
  }

  teardown() {
    try {
      this.channel?.close();
      this.pc?.close();
    } catch {
      // already closed
    }
    this.video.srcObject = null;
  }

  reportClosed(info) {
    if (this.closedReported) return;
    this.closedReported = true;
    this.teardown();
    this.handlers.onClosed(info);
  }

  /** The inbound video figures of getStats(), or null before there are any. */
  async rtcStats() {
    if (!this.pc || this.closedReported) return null;
    const report = await this.pc.getStats();
    let inbound = null;
    const codecs = new Map();
    report.forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "video") inbound = s;
      if (s.type === "codec") codecs.set(s.id, s.mimeType);
    });
    if (!inbound) return null;
    return {
      framesDecoded: inbound.framesDecoded ?? 0,
      framesDropped: inbound.framesDropped ?? 0,
      framesReceived: inbound.framesReceived ?? 0,
      freezeCount: inbound.freezeCount ?? 0,
      totalFreezesDuration: inbound.totalFreezesDuration ?? 0,
      jitterBufferDelay: inbound.jitterBufferDelay ?? 0,
      jitterBufferEmittedCount: inbound.jitterBufferEmittedCount ?? 0,
      framesPerSecond: inbound.framesPerSecond ?? null,
      frameWidth: inbound.frameWidth ?? null,
      frameHeight: inbound.frameHeight ?? null,
      codec: codecs.get(inbound.codecId) || null,
    };
  }
}
