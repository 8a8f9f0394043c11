// The demo page: one stream at a time over WebRTC (default) or WebSocket, with presets, live
// redirects, game keys, avatar controls and a stats overlay. Built on docs/protocol.md only.
//
// The page is a small state machine (STATES below); `window.streamerDemo` exposes its state,
// figures, the messages it sent and a pixel read-back of the current frame for tests and tools.

import { ControlSender, KeyActions, MicMouth } from "./controls.js";
import { pingMessage, promptMessage, sceneOf, startFields } from "./protocol.js";
import { StreamStats, renderStats } from "./stats.js";
import { WebRtcTransport } from "./webrtc.js";
import { WsTransport } from "./ws.js";

const PRESETS = {
  story: "a red ball moving right on grass",
  game: "game: a red character on sand",
  avatar: "avatar: pale skin black hair on sky",
};

// state -> the states it may move to. `connecting` is entered only by a user's start.
const STATES = {
  idle: ["connecting"],
  connecting: ["admitted", "refused", "error", "ended"],
  admitted: ["ended", "error"],
  refused: ["connecting"],
  error: ["connecting"],
  ended: ["connecting"],
};
const LIVE = new Set(["connecting", "admitted"]);
const LOG_KEEP = 300;
const INFO_WAIT_MS = 1000; // the offer waits this long at most for /v1/info (the default codec)
const STOP_GRACE_MS = 3000; // after `stop`, close anyway if the server has not ended the session

const $ = (id) => document.getElementById(id);
const ui = {
  state: $("state"), viewport: $("viewport"), video: $("video"), canvas: $("canvas"),
  overlay: $("overlay-msg"), stats: $("stats"), notice: $("notice"),
  start: $("start"), stop: $("stop"), reconnect: $("reconnect"), statsToggle: $("stats-toggle"),
  form: $("prompt-form"), prompt: $("prompt"), send: $("send"), transition: $("transition"), unknown: $("unknown"),
  gamePanel: $("game-panel"), avatarPanel: $("avatar-panel"),
  mouth: $("mouth"), mouthValue: $("mouth-value"), eyes: $("eyes"), eyesValue: $("eyes-value"),
  mic: $("mic"), micLevel: $("mic-level"), codec: $("codec"), seed: $("seed"), steps: $("steps"),
  events: $("events"),
};

class App {
  constructor() {
    this.state = "idle";
    this.reason = null;
    this.scene = "story";
    this.transport = null;
    this.session = null;
    this.stats = new StreamStats();
    this.unknownWords = [];
    this.events = []; // server events (not `chunk`), newest last
    this.sent = []; // client control messages, newest last
    this.offers = []; // WebRTC offer `start` fields sent
    this.serverStats = null;
    this.msgSeq = 0;
    this.timers = [];
    this.keys = new KeyActions(ui.viewport, (m) => this.send(m));
    this.controls = new ControlSender((m) => this.send(m), 20);
    this.mic = new MicMouth((level) => this.setMouth(level, true));
    this.bind();
    this.choosePreset("story", { redirect: false });
    this.info = null; // GET /v1/info: the model, fps, the default WebRTC codec
    this.infoReady = fetch("/v1/info")
      .then((r) => (r.ok ? r.json() : null))
      .catch(() => null)
      .then((info) => (this.info = info));
    setInterval(() => this.render(), 250);
  }

  // ---- state ----
  setState(next, reason = null) {
    if (next === this.state) return;
    if (!STATES[this.state].includes(next)) {
      throw new Error(`illegal state change ${this.state} -> ${next}`);
    }
    this.state = next;
    this.reason = reason;
    const label = reason ? `${next}: ${reason}` : next;
    ui.state.textContent = label;
    ui.state.dataset.state = next;
    const live = LIVE.has(next);
    ui.start.disabled = live;
    ui.stop.disabled = !live;
    ui.reconnect.hidden = !["refused", "error", "ended"].includes(next);
    document.querySelectorAll('input[name="transport"], #codec, #seed, #steps').forEach((el) => (el.disabled = live));
    ui.send.textContent = next === "admitted" ? "Redirect" : "Go";
    ui.overlay.textContent = {
      connecting: "Connecting…",
      admitted: "",
      refused: `Refused by the server: ${reason}`,
      error: `Error: ${reason}`,
      ended: `Stream ended${reason ? ` (${reason})` : ""}. Reconnect to start again.`,
    }[next] ?? "";
    if (!live) this.stopTimers();
  }

  // ---- session lifecycle ----
  start() {
    if (LIVE.has(this.state)) return;
    this.teardown();
    this.setState("connecting");
    this.hideNotice();
    this.stats.reset(performance.now());
    this.session = null;
    this.serverStats = null;
    this.unknownWords = [];
    ui.unknown.textContent = "";
    this.keys.reset();
    this.controls.reset();
    const kind = document.querySelector('input[name="transport"]:checked').value;
    const opts = { prompt: ui.prompt.value, scene: this.scene, seed: ui.seed.value, steps: ui.steps.value };
    ui.canvas.hidden = kind !== "ws";
    ui.video.hidden = kind === "ws";
    // Callbacks count only while their transport is the current one: a closed one may report late.
    let t = null;
    const guard = (fn) => (...args) => t !== null && this.transport === t && fn(...args);
    const handlers = {
      onEvent: guard((e) => this.onEvent(e)),
      onChunk: guard((c) => this.stats.chunk(c)),
      onFrame: guard((f) => this.stats.frame(f)),
      onDrop: guard((n) => this.stats.dropped(n)),
      onClosed: guard((info) => this.onClosed(info)),
      onSent: guard((m) => this.record(this.sent, m)),
    };
    if (kind === "webrtc") {
      const defaultCodec = Promise.race([
        this.infoReady.then((info) => info?.transports?.default_codec || ""),
        new Promise((resolve) => setTimeout(() => resolve(""), INFO_WAIT_MS)),
      ]);
      t = new WebRtcTransport(ui.video, handlers, { codec: ui.codec.value, defaultCodec });
      this.offers.push(startFields(opts));
    } else {
      t = new WsTransport(ui.canvas, handlers);
    }
    this.transport = t;
    t.start(opts);
  }

  stop() {
    if (!this.transport || !LIVE.has(this.state)) return;
    const t = this.transport;
    t.stop();
    setTimeout(() => t === this.transport && LIVE.has(this.state) && t.close(), STOP_GRACE_MS);
  }

  teardown() {
    this.stopTimers();
    if (this.transport) {
      const t = this.transport;
      this.transport = null;
      t.close();
    }
  }

  stopTimers() {
    this.timers.forEach(clearInterval);
    this.timers = [];
  }

  onEvent(e) {
    if (!e || typeof e.type !== "string") return;
    if (e.type !== "chunk") this.record(this.events, e);
    switch (e.type) {
      case "admitted":
        if (this.state !== "connecting") break; // stopped while the answer was in flight
        this.session = e;
        this.stats.admitted(e.frames_per_chunk);
        if (e.width && e.height) document.documentElement.style.setProperty("--ar", String(e.width / e.height));
        this.setState("admitted");
        this.afterAdmitted();
        break;
      case "refused":
        if (this.state !== "connecting") break;
        this.setState("refused", e.queue_position != null ? `${e.reason} (queue position ${e.queue_position})` : e.reason);
        break;
      case "prompt":
        this.showUnknown(e.unknown_words || []);
        break;
      case "error":
        this.showNotice(`Server error ${e.code}${e.field ? ` (${e.field})` : ""}: ${e.message}`, "warn");
        break;
      case "pong":
        this.stats.pong(e);
        break;
      case "stats":
        if (e.source === "transport") this.serverStats = e;
        break;
      case "ended":
        if (LIVE.has(this.state)) this.setState("ended", e.reason);
        break;
      default:
        break;
    }
  }

  onClosed({ code, reason, clean }) {
    if (!LIVE.has(this.state)) return;
    if (clean && (code === 1000 || code === null)) this.setState("ended", reason || "connection closed");
    else this.setState("error", reason || `connection closed (code ${code})`);
  }

  afterAdmitted() {
    if (this.scene === "avatar") this.controls.set({ mouth: Number(ui.mouth.value), eyes: Number(ui.eyes.value) });
    if (this.scene === "game" && document.activeElement === ui.start) ui.viewport.focus();
    this.timers.push(setInterval(() => this.send(pingMessage()), 2000));
    if (this.transport.kind === "webrtc") {
      const t = this.transport;
      this.timers.push(setInterval(async () => this.stats.setRtc(await t.rtcStats()), 1000));
    }
  }

  /** Send a control message; each gets an id, which the server echoes in its ack or error. */
  send(msg) {
    if (this.state !== "admitted" || !this.transport) return false;
    return this.transport.send({ ...msg, id: ++this.msgSeq });
  }

  redirect(text) {
    const msg = promptMessage(text, ui.transition.value);
    if (!this.send(msg)) return false;
    this.updatePanels(sceneOf(text));
    return true;
  }

  // ---- UI ----
  bind() {
    ui.start.addEventListener("click", () => this.start());
    ui.reconnect.addEventListener("click", () => this.start());
    ui.stop.addEventListener("click", () => this.stop());
    ui.statsToggle.addEventListener("click", () => {
      const on = ui.statsToggle.getAttribute("aria-pressed") !== "true";
      ui.statsToggle.setAttribute("aria-pressed", String(on));
      ui.stats.hidden = !on;
    });
    ui.form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (this.state === "admitted") this.redirect(ui.prompt.value);
      else if (!LIVE.has(this.state)) {
        this.scene = sceneOf(ui.prompt.value);
        this.updatePanels(this.scene);
        this.start();
      }
    });
    document.querySelectorAll("[data-scene]").forEach((b) =>
      b.addEventListener("click", () => this.choosePreset(b.dataset.scene, { redirect: true })),
    );
    document.querySelectorAll("[data-dir]").forEach((b) => {
      const dir = b.dataset.dir;
      const up = () => {
        b.classList.remove("held");
        this.keys.release(dir);
      };
      b.addEventListener("pointerdown", (e) => {
        e.preventDefault();
        b.setPointerCapture(e.pointerId);
        b.classList.add("held");
        this.keys.press(dir);
      });
      b.addEventListener("pointerup", up);
      b.addEventListener("pointercancel", up);
      b.addEventListener("keydown", (e) => (e.key === " " || e.key === "Enter") && !e.repeat && this.keys.press(dir));
      b.addEventListener("keyup", (e) => (e.key === " " || e.key === "Enter") && up());
      b.addEventListener("blur", up);
    });
    ui.mouth.addEventListener("input", () => this.setMouth(Number(ui.mouth.value), false));
    ui.eyes.addEventListener("input", () => {
      ui.eyesValue.textContent = Number(ui.eyes.value).toFixed(2);
      this.controls.set({ eyes: Number(ui.eyes.value) });
    });
    ui.mic.addEventListener("click", () => this.toggleMic());
    ui.viewport.addEventListener("pointerdown", () => ui.viewport.focus());
    window.addEventListener("pagehide", () => {
      if (this.transport?.kind === "webrtc") this.transport.deleteSession(true);
      this.teardown();
    });
  }

  choosePreset(scene, { redirect }) {
    this.scene = scene;
    ui.prompt.value = PRESETS[scene];
    document.querySelectorAll("[data-scene]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.scene === scene)));
    this.updatePanels(scene);
    if (redirect && this.state === "admitted") this.redirect(ui.prompt.value);
  }

  updatePanels(scene) {
    ui.gamePanel.hidden = scene !== "game";
    ui.avatarPanel.hidden = scene !== "avatar";
  }

  setMouth(value, fromMic) {
    ui.mouthValue.textContent = value.toFixed(2);
    if (fromMic) {
      ui.mouth.value = String(value);
      ui.micLevel.value = value;
    }
    this.controls.set({ mouth: value });
  }

  async toggleMic() {
    if (this.mic.active) {
      this.mic.stop();
      ui.mic.setAttribute("aria-pressed", "false");
      ui.mic.textContent = "Use microphone";
      ui.micLevel.value = 0;
      return;
    }
    try {
      await this.mic.start();
      ui.mic.setAttribute("aria-pressed", "true");
      ui.mic.textContent = "Stop microphone";
    } catch (err) {
      this.mic.stop();
      this.showNotice(`Microphone unavailable: ${err.message || err.name}`, "warn");
    }
  }

  showUnknown(words) {
    this.unknownWords = words;
    ui.unknown.textContent = words.length ? `Not understood (ignored): ${words.join(", ")}` : "";
  }

  showNotice(text, level) {
    ui.notice.hidden = false;
    ui.notice.dataset.level = level;
    ui.notice.textContent = text;
  }

  hideNotice() {
    ui.notice.hidden = true;
    ui.notice.textContent = "";
  }

  record(list, item) {
    list.push(item);
    if (list.length > LOG_KEEP) list.splice(0, list.length - LOG_KEEP);
    if (list === this.events && item.type !== "stats") {
      const li = document.createElement("li");
      li.textContent = JSON.stringify(item, (k, v) => (k === "token" ? "(secret)" : v));
      ui.events.append(li);
      while (ui.events.childElementCount > 100) ui.events.firstElementChild.remove();
    }
  }

  render() {
    renderStats(ui.stats, this.stats.snapshot(), this.transport?.kind ?? null);
  }

  // ---- pixels (test hook) ----
  /** RGB bytes of the frame on screen at the stream's own size, or null before the first frame. */
  pixels() {
    const el = this.transport?.element;
    if (!el) return null;
    if (el instanceof HTMLVideoElement ? el.readyState < 2 : this.stats.framesShown === 0) return null;
    const w = (el instanceof HTMLVideoElement ? el.videoWidth : el.width) || this.session?.width;
    const h = (el instanceof HTMLVideoElement ? el.videoHeight : el.height) || this.session?.height;
    if (!w || !h) return null;
    this.scratch ??= document.createElement("canvas");
    this.scratch.width = w;
    this.scratch.height = h;
    const ctx = this.scratch.getContext("2d", { willReadFrequently: true });
    ctx.drawImage(el, 0, 0, w, h);
    const rgba = ctx.getImageData(0, 0, w, h).data;
    const rgb = new Uint8Array(w * h * 3);
    for (let i = 0, j = 0; i < rgba.length; i += 4, j += 3) {
      rgb[j] = rgba[i];
      rgb[j + 1] = rgba[i + 1];
      rgb[j + 2] = rgba[i + 2];
    }
    return { width: w, height: h, rgb };
  }
}

const app = new App();

window.streamerDemo = {
  get state() { return app.state; },
  get reason() { return app.reason; },
  get transport() { return app.transport?.kind ?? null; },
  get session() {
    const s = app.session;
    return s && { session_id: s.session_id, fps: s.fps, frames_per_chunk: s.frames_per_chunk, width: s.width, height: s.height, codec: s.codec ?? null };
  },
  get stats() { return app.stats.snapshot(); },
  get serverStats() { return app.serverStats; },
  get info() { return app.info; },
  get unknownWords() { return [...app.unknownWords]; },
  get events() { return app.events.map((e) => ({ ...e })); },
  get sent() { return app.sent.map((m) => ({ ...m })); },
  get offers() { return app.offers.map((o) => ({ ...o })); },
  /** Mean [r, g, b] of the current frame, or null. */
  meanColor() {
    const p = app.pixels();
    if (!p) return null;
    const sum = [0, 0, 0];
    for (let i = 0; i < p.rgb.length; i += 3) {
      sum[0] += p.rgb[i];
      sum[1] += p.rgb[i + 1];
      sum[2] += p.rgb[i + 2];
    }
    const n = p.rgb.length / 3;
    return sum.map((s) => s / n);
  },
  /** The current frame as {width, height, rgb: base64 of H*W*3 bytes, row-major}, or null. */
  readFrame() {
    const p = app.pixels();
    if (!p) return null;
    let bin = "";
    for (let i = 0; i < p.rgb.length; i += 0x8000) bin += String.fromCharCode(...p.rgb.subarray(i, i + 0x8000));
    return { width: p.width, height: p.height, rgb: btoa(bin) };
  },
  start: () => app.start(),
  stop: () => app.stop(),
};
