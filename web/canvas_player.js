// Plays WebSocket chunks on a canvas at the session's fps, latest-frame-wins.
//
// Each chunk's frames are decoded off the main thread (createImageBitmap) as soon as the chunk
// arrives, then queued in chunk order, 1/fps apart from the chunk's capture time plus the
// smallest delay seen recently. A chunk that arrives late plays at once and the next ones
// catch up (frames then come up to 1/CATCH_UP faster), so a hiccup does not add lasting delay.
// An animation-frame loop draws the newest frame that is due; older due frames are skipped and
// counted, and a backlog of more than two chunks is dropped rather than played late.

import { ENCODING_JPEG, ENCODING_RGB } from "./protocol.js";

const TRANSIT_WINDOW = 32; // chunks over which the smallest capture-to-decoded delay is taken
const CATCH_UP = 0.75; // minimum spacing of frames, in frame intervals, while catching up

async function decodeFrame(payload, encoding, width, height) {
  if (encoding === ENCODING_JPEG) {
    return createImageBitmap(new Blob([payload], { type: "image/jpeg" }));
  }
  if (encoding === ENCODING_RGB) {
    const rgba = new Uint8ClampedArray(width * height * 4);
    for (let i = 0, j = 0; i < payload.length; i += 3, j += 4) {
      rgba[j] = payload[i];
      rgba[j + 1] = payload[i + 1];
      rgba[j + 2] = payload[i + 2];
      rgba[j + 3] = 255;
    }
    return createImageBitmap(new ImageData(rgba, width, height));
  }
  throw new Error(`unknown frame encoding ${encoding}`);
}

export class CanvasPlayer {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{onFrame: Function, onDrop: Function, onError: Function}} handlers
   *   onFrame({chunkIndex, frameIndex, firstOfChunk, captureTs, displayWallS}) per drawn frame,
   *   onDrop(n) for frames decoded but never drawn.
   */
  constructor(canvas, handlers) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.handlers = handlers;
    this.fps = 24;
    this.queue = []; // [{bitmap, due, chunk, i}]
    this.chain = Promise.resolve();
    this.transits = []; // ms from capture_ts to decoded, recent chunks
    this.lastDue = 0;
    this.closed = false;
    this.tick = this.tick.bind(this);
    this.raf = requestAnimationFrame(this.tick);
  }

  push(chunk) {
    if (this.closed) return;
    // Decode every frame of the chunk in parallel now; queue them in arrival order.
    const job = Promise.all(chunk.frames.map((p) => decodeFrame(p, chunk.encoding, chunk.width, chunk.height)));
    this.chain = this.chain.then(async () => {
      let bitmaps;
      try {
        bitmaps = await job;
      } catch (err) {
        this.handlers.onError?.(`frame decode failed (chunk ${chunk.chunkIndex}): ${err.message || err}`);
        return;
      }
      if (this.closed) {
        bitmaps.forEach((b) => b.close());
        return;
      }
      this.enqueue(chunk, bitmaps);
    });
  }

  enqueue(chunk, bitmaps) {
    if (chunk.fps > 0) this.fps = chunk.fps;
    const interval = 1000 / this.fps;
    const now = performance.now();
    const n = bitmaps.length;
    // Anchor the chunk to its capture time plus the smallest recent transit (which also absorbs
    // a clock offset between hosts), so one late chunk does not delay every later one.
    const captured = chunk.captureTs * 1000 - performance.timeOrigin;
    this.transits.push(now - captured);
    if (this.transits.length > TRANSIT_WINDOW) this.transits.shift();
    const anchor = captured + Math.min(...this.transits);
    if (this.queue.length > 2 * n) this.dropQueued(); // latest-frame-wins: never play a backlog late
    let prev = this.queue.length ? this.lastDue : -Infinity;
    bitmaps.forEach((bitmap, i) => {
      // In order, never faster than 1 / CATCH_UP of the fps while catching up, never in the past.
      const due = Math.max(anchor + i * interval, prev + CATCH_UP * interval, now);
      this.queue.push({ bitmap, due, chunk, i });
      prev = due;
    });
    this.lastDue = prev;
  }

  dropQueued() {
    const n = this.queue.length;
    this.queue.forEach((f) => f.bitmap.close());
    this.queue = [];
    if (n) this.handlers.onDrop?.(n);
  }

  tick() {
    if (this.closed) return;
    const now = performance.now();
    let frame = null;
    let skipped = 0;
    // A few ms early is fine: the next animation frame would be later than that.
    while (this.queue.length && this.queue[0].due <= now + 4) {
      if (frame) {
        frame.bitmap.close();
        skipped++;
      }
      frame = this.queue.shift();
    }
    if (skipped) this.handlers.onDrop?.(skipped);
    if (frame) this.draw(frame);
    this.raf = requestAnimationFrame(this.tick);
  }

  draw({ bitmap, chunk, i }) {
    if (this.canvas.width !== bitmap.width || this.canvas.height !== bitmap.height) {
      this.canvas.width = bitmap.width;
      this.canvas.height = bitmap.height;
    }
    this.ctx.drawImage(bitmap, 0, 0);
    bitmap.close();
    this.handlers.onFrame?.({
      chunkIndex: chunk.chunkIndex,
      frameIndex: chunk.firstFrame + i,
      firstOfChunk: i === 0,
      captureTs: chunk.captureTs,
      displayWallS: (performance.timeOrigin + performance.now()) / 1000,
    });
  }

  close() {
    this.closed = true;
    cancelAnimationFrame(this.raf);
    this.queue.forEach((f) => f.bitmap.close());
    this.queue = [];
  }
}
