// Live stream figures for the overlay and the test hook.
//
// Time to first frame runs from the Start click to the first displayed frame. Frames/s counts
// displayed frames over the last second. Dropped frames are split by where they were lost:
// `server` from gaps in the chunk index (chunks the server skipped for this client) and
// `client` from frames the page decoded but never showed (WebSocket) or getStats'
// framesDropped (WebRTC). Latency is display time minus the chunk's capture_ts, sampled on the
// first frame of each chunk; "arrival" is the part before the page: capture_ts to the chunk's
// arrival (WebSocket) or to its `chunk` event, sent as its first frame leaves (WebRTC).

const WINDOW = 50; // latency samples kept

function median(xs) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export class StreamStats {
  constructor() {
    this.reset();
  }

  reset(startedAt = null) {
    this.startedAt = startedAt; // performance.now() of the Start click
    this.admittedMs = null;
    this.firstFrameMs = null;
    this.framesShown = 0;
    this.frameTimes = []; // performance.now() of recent displayed frames
    this.chunks = 0;
    this.lastChunkIndex = null;
    this.framesPerChunk = 1;
    this.serverDropped = 0;
    this.clientDropped = 0;
    this.latencies = []; // seconds
    this.arrivals = []; // seconds from capture_ts to the chunk's arrival (or its chunk event's)
    this.rtc = null;
    this.rtcPrev = null;
    this.jitterMsPerFrame = null;
    this.rttMs = null;
  }

  admitted(framesPerChunk) {
    if (this.startedAt !== null) this.admittedMs = performance.now() - this.startedAt;
    this.framesPerChunk = framesPerChunk || 1;
  }

  chunk({ chunkIndex, captureTs }) {
    this.chunks++;
    if (captureTs) {
      this.arrivals.push((performance.timeOrigin + performance.now()) / 1000 - captureTs);
      if (this.arrivals.length > WINDOW) this.arrivals.shift();
    }
    if (this.lastChunkIndex !== null && chunkIndex > this.lastChunkIndex + 1) {
      this.serverDropped += (chunkIndex - this.lastChunkIndex - 1) * this.framesPerChunk;
    }
    this.lastChunkIndex = Math.max(chunkIndex, this.lastChunkIndex ?? chunkIndex);
  }

  frame({ firstOfChunk, captureTs, displayWallS }) {
    const now = performance.now();
    if (this.firstFrameMs === null && this.startedAt !== null) this.firstFrameMs = now - this.startedAt;
    this.framesShown++;
    this.frameTimes.push(now);
    while (this.frameTimes.length && this.frameTimes[0] < now - 1000) this.frameTimes.shift();
    if (firstOfChunk && captureTs) {
      this.latencies.push(displayWallS - captureTs);
      if (this.latencies.length > WINDOW) this.latencies.shift();
    }
  }

  dropped(n) {
    this.clientDropped += n;
  }

  pong(event) {
    if (typeof event.t === "number") this.rttMs = Date.now() - event.t * 1000;
  }

  setRtc(rtc) {
    if (!rtc) return;
    const prev = this.rtcPrev;
    if (prev && rtc.jitterBufferEmittedCount > prev.jitterBufferEmittedCount) {
      const d = (rtc.jitterBufferDelay - prev.jitterBufferDelay) / (rtc.jitterBufferEmittedCount - prev.jitterBufferEmittedCount);
      this.jitterMsPerFrame = d * 1000;
    } else if (!prev && rtc.jitterBufferEmittedCount > 0) {
      this.jitterMsPerFrame = (rtc.jitterBufferDelay / rtc.jitterBufferEmittedCount) * 1000;
    }
    this.rtcPrev = rtc;
    this.rtc = rtc;
  }

  snapshot() {
    const now = performance.now();
    const recent = this.frameTimes.filter((t) => t >= now - 1000);
    const rtc = this.rtc;
    return {
      timeToAdmittedMs: this.admittedMs,
      timeToFirstFrameMs: this.firstFrameMs,
      framesShown: this.framesShown,
      fps: recent.length,
      chunks: this.chunks,
      lastChunkIndex: this.lastChunkIndex,
      droppedServer: this.serverDropped,
      droppedClient: this.clientDropped + (rtc ? rtc.framesDropped : 0),
      latencyLastMs: this.latencies.length ? this.latencies[this.latencies.length - 1] * 1000 : null,
      latencyP50Ms: this.latencies.length ? median(this.latencies) * 1000 : null,
      arrivalP50Ms: this.arrivals.length ? median(this.arrivals) * 1000 : null,
      rttMs: this.rttMs,
      jitterBufferMsPerFrame: this.jitterMsPerFrame,
      rtc: rtc ? { ...rtc } : null,
    };
  }
}

const fmt = (x, digits = 0, unit = "") => (x === null || x === undefined ? "–" : `${x.toFixed(digits)}${unit}`);

/** Render a snapshot into the overlay's <dl> (rows created once, values updated in place). */
export function renderStats(dl, snap, transport) {
  const rows = [
    ["First frame", fmt(snap.timeToFirstFrameMs, 0, " ms")],
    ["Frames/s", fmt(snap.fps)],
    ["Latency", snap.latencyP50Ms === null ? "–" : `${fmt(snap.latencyLastMs, 0)} ms (p50 ${fmt(snap.latencyP50Ms, 0)})`],
    [transport === "webrtc" ? "Chunk sent" : "Chunk arrived", fmt(snap.arrivalP50Ms, 0, " ms p50")],
    ["Dropped", `${snap.droppedServer} server · ${snap.droppedClient} client`],
    ["Chunks", `${snap.chunks}`],
    ["Round trip", fmt(snap.rttMs, 0, " ms")],
  ];
  if (transport === "webrtc") {
    const r = snap.rtc;
    rows.push(
      ["Jitter buffer", fmt(snap.jitterBufferMsPerFrame, 1, " ms/frame")],
      ["Decoded", r ? `${r.framesDecoded}` : "–"],
      ["Freezes", r ? `${r.freezeCount}` : "–"],
      ["Codec", r && r.codec ? r.codec.replace("video/", "") : "–"],
    );
  }
  if (dl.childElementCount !== rows.length * 2) {
    dl.replaceChildren(...rows.flatMap(([k]) => [Object.assign(document.createElement("dt"), { textContent: k }), document.createElement("dd")]));
  }
  rows.forEach(([, v], i) => {
    const dd = dl.children[2 * i + 1];
    if (dd.textContent !== v) dd.textContent = v;
  });
}
