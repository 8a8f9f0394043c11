// Wire protocol v1 (docs/protocol.md): the binary chunk layout and builders for every client
// message the page sends. The builders clamp and check their input, so the page only ever sends
// messages the server's schemas accept.

export const PROTOCOL_VERSION = 1;
export const MAX_PROMPT_CHARS = 500;
export const ACTIONS = ["none", "left", "right", "up", "down"];
export const SCENES = ["story", "game", "avatar"];
export const TRANSITIONS = ["cut", "blend", "recache"];
export const CODECS = ["h264", "vp8"];

const HEADER_BYTES = 48;
const MAGIC = [0x53, 0x54, 0x52, 0x4d]; // "STRM"
export const ENCODING_JPEG = 0;
export const ENCODING_RGB = 1;

export class ChunkError extends Error {}

/** Parse one binary chunk message (an ArrayBuffer) into its header and frame payloads. */
export function parseChunk(buf) {
  if (buf.byteLength < HEADER_BYTES) throw new ChunkError(`chunk message of ${buf.byteLength} bytes`);
  const v = new DataView(buf);
  for (let i = 0; i < 4; i++) {
    if (v.getUint8(i) !== MAGIC[i]) throw new ChunkError("bad magic (not STRM)");
  }
  const version = v.getUint8(4);
  if (version !== PROTOCOL_VERSION) throw new ChunkError(`chunk protocol version ${version}`);
  const chunk = {
    encoding: v.getUint8(5),
    frameCount: v.getUint16(6, true),
    width: v.getUint16(8, true),
    height: v.getUint16(10, true),
    chunkIndex: v.getUint32(12, true),
    firstFrame: v.getUint32(16, true),
    fps: v.getFloat32(20, true),
    sessionId: uuidString(new Uint8Array(buf, 24, 16)),
    captureTs: v.getFloat64(40, true),
    frames: [],
  };
  let pos = HEADER_BYTES;
  for (let i = 0; i < chunk.frameCount; i++) {
    if (pos + 4 > buf.byteLength) throw new ChunkError(`frame ${i}: truncated length`);
    const n = v.getUint32(pos, true);
    if (pos + 4 + n > buf.byteLength) throw new ChunkError(`frame ${i}: truncated payload`);
    chunk.frames.push(new Uint8Array(buf, pos + 4, n));
    pos += 4 + n;
  }
  return chunk;
}

function uuidString(bytes) {
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function prompt(text) {
  return String(text ?? "").slice(0, MAX_PROMPT_CHARS);
}

function unit(x) {
  const n = Number(x);
  return Number.isFinite(n) ? Math.min(1, Math.max(0, n)) : 0;
}

function nonNegativeInt(x) {
  const n = Number(x);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/**
 * The start fields shared by the WebSocket `start` message and the WebRTC offer's `start`.
 * Empty or invalid optional values are left out, so the server's defaults apply.
 */
export function startFields({ prompt: text, scene, seed, steps } = {}) {
  const fields = { prompt: prompt(text) };
  if (SCENES.includes(scene)) fields.scene = scene;
  const s = seed === "" || seed == null ? null : nonNegativeInt(seed);
  if (s !== null) fields.seed = s;
  const k = steps === "" || steps == null ? null : nonNegativeInt(steps);
  if (k !== null && k >= 1 && k <= 8) fields.steps = k;
  return fields;
}

export function startMessage(opts) {
  return { type: "start", ...startFields(opts), encoding: "jpeg", quality: 85, protocol: PROTOCOL_VERSION };
}

export function promptMessage(text, transition = "blend", id = undefined) {
  const msg = { type: "prompt", prompt: prompt(text), transition: TRANSITIONS.includes(transition) ? transition : "blend" };
  if (id !== undefined) msg.id = id;
  return msg;
}

export function actionMessage(action) {
  if (!ACTIONS.includes(action)) throw new RangeError(`action must be one of ${ACTIONS.join(", ")}`);
  return { type: "action", action };
}

/** `control` with the given values (mouth, eyes) clamped to [0, 1]; at least one is required. */
export function controlMessage({ mouth, eyes } = {}) {
  const msg = { type: "control" };
  if (mouth != null) msg.mouth = unit(mouth);
  if (eyes != null) msg.eyes = unit(eyes);
  if (msg.mouth === undefined && msg.eyes === undefined) throw new RangeError("control needs mouth or eyes");
  return msg;
}

export const stopMessage = () => ({ type: "stop" });
export const pingMessage = () => ({ type: "ping", t: Date.now() / 1000 });

/** Words of a prompt that mark its scene kind, as the embedded model's vocabulary reads them. */
export function sceneOf(text) {
  const words = String(text).toLowerCase().match(/[a-z]+/g) || [];
  if (words.some((w) => ["avatar", "face", "skin", "hair", "head"].includes(w))) return "avatar";
  if (words.some((w) => ["game", "character", "player", "sprite"].includes(w))) return "game";
  return "story";
}
