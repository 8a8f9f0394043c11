// Live inputs: game keys -> `action` messages, avatar slider/microphone -> `control` messages.

import { actionMessage, controlMessage } from "./protocol.js";

const KEY_ACTIONS = {
  ArrowLeft: "left", ArrowRight: "right", ArrowUp: "up", ArrowDown: "down",
  KeyA: "left", KeyD: "right", KeyW: "up", KeyS: "down",
};

/**
 * Arrow keys / WASD while `target` has focus. The action is the most recently pressed key still
 * held; it is sent only when it changes (key repeat sends nothing), and `none` when the last key
 * is released or focus leaves. `press`/`release` serve the on-screen pad too.
 */
export class KeyActions {
  constructor(target, send) {
    this.send = send; // (msg) => bool
    this.held = [];
    this.current = "none";
    target.addEventListener("keydown", (e) => {
      const dir = KEY_ACTIONS[e.code];
      if (!dir || e.altKey || e.ctrlKey || e.metaKey) return;
      e.preventDefault(); // arrows would scroll the page
      if (!e.repeat) this.press(dir);
    });
    target.addEventListener("keyup", (e) => {
      const dir = KEY_ACTIONS[e.code];
      if (!dir) return;
      e.preventDefault();
      this.release(dir);
    });
    target.addEventListener("blur", () => this.releaseAll());
  }

  press(dir) {
    this.held = this.held.filter((d) => d !== dir);
    this.held.push(dir);
    this.update();
  }

  release(dir) {
    this.held = this.held.filter((d) => d !== dir);
    this.update();
  }

  releaseAll() {
    this.held = [];
    this.update();
  }

  update() {
    const action = this.held.length ? this.held[this.held.length - 1] : "none";
    if (action === this.current) return;
    if (this.send(actionMessage(action))) this.current = action;
  }

  /** A new session starts with no key held. */
  reset() {
    this.held = [];
    this.current = "none";
  }
}

/** Coalesces avatar control values and sends the latest at most `hz` times a second. */
export class ControlSender {
  constructor(send, hz = 20) {
    this.send = send;
    this.pending = {};
    this.last = {};
    this.timer = setInterval(() => this.flush(), 1000 / hz);
  }

  set(values) {
    Object.assign(this.pending, values);
  }

  flush() {
    const changed = {};
    for (const [k, v] of Object.entries(this.pending)) {
      if (this.last[k] === undefined || Math.abs(this.last[k] - v) >= 0.005) changed[k] = v;
    }
    this.pending = {};
    if (!Object.keys(changed).length) return;
    if (this.send(controlMessage(changed))) Object.assign(this.last, changed);
  }

  reset() {
    this.pending = {};
    this.last = {};
  }
}

/**
 * Microphone loudness (Web Audio AnalyserNode) mapped to a mouth opening in [0, 1], read at
 * `hz`. Speech sits around -40..-10 dBFS; the mapping opens the mouth across that range, with a
 * fast attack and a slower release so the mouth does not flicker between syllables.
 */
export class MicMouth {
  constructor(onLevel, hz = 20) {
    this.onLevel = onLevel;
    this.hz = hz;
    this.level = 0;
    this.stream = null;
    this.audio = null;
    this.timer = null;
  }

  get active() {
    return this.stream !== null;
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: true, noiseSuppression: true } });
    this.audio = new AudioContext();
    const analyser = this.audio.createAnalyser();
    analyser.fftSize = 1024;
    this.audio.createMediaStreamSource(this.stream).connect(analyser);
    const buf = new Float32Array(analyser.fftSize);
    this.timer = setInterval(() => {
      analyser.getFloatTimeDomainData(buf);
      let sum = 0;
      for (const x of buf) sum += x * x;
      const db = 10 * Math.log10(sum / buf.length + 1e-12);
      const target = Math.min(1, Math.max(0, (db + 45) / 35));
      this.level += (target - this.level) * (target > this.level ? 0.6 : 0.25);
      this.onLevel(this.level);
    }, 1000 / this.hz);
  }

  stop() {
    clearInterval(this.timer);
    this.stream?.getTracks().forEach((t) => t.stop());
    this.audio?.close();
    this.stream = this.audio = this.timer = null;
    this.level = 0;
  }
}
