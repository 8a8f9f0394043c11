"""Pixel evaluator of the embedded model: reads the procedural world back from frames.

Because the world is procedural, generated frames can be scored against the prompt without a
learned judge: the background is compared with the renderer's own background images, objects
are pixels far from that background grouped into connected components and named by the
nearest palette colour and by their fill ratio, and motion is the direction of each object's
centroid track (unwrapped across the torus edges). Game and avatar streams are read through
the character's centroid and the mouth's height. Pure numpy; `self_check` validates it on ground-truth and scrambled clips.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .scenery import EYE_WHITE, MOUTH_COLOR, background_image, scale_of, wall_width
from .vocab import BACKGROUNDS, COLORS, SceneSpec

_PALETTE_NAMES = tuple(COLORS)
_PALETTE = np.array([COLORS[c] for c in _PALETTE_NAMES], np.float32)  # (K, 3)
FG_THRESHOLD = 50.0  # RGB distance from the background that counts as foreground
PALETTE_MAX = 80.0  # farther than this from every palette colour: not an object pixel
_POOL = 8  # background matching works on 8x8 block means, which wash out textures


@dataclass(frozen=True)
class Detection:
    """One object found in a frame: palette colour, shape, centre (x, y), pixel area."""

    color: str
    shape: str
    centre: tuple[float, float]
    area: int


def _pool(img: np.ndarray) -> np.ndarray:
    h, w = img.shape[0] // _POOL, img.shape[1] // _POOL
    crop = img[: h * _POOL, : w * _POOL].astype(np.float32)
    return crop.reshape(h, _POOL, w, _POOL, 3).mean(axis=(1, 3))  # (h, w, 3)


@lru_cache(maxsize=16)
def _pooled_backgrounds(size: int) -> np.ndarray:
    return np.stack([_pool(background_image(b, size)) for b in BACKGROUNDS])  # (B, h, w, 3)


def background_of(frame: np.ndarray) -> str:
    """The background whose block means match the most blocks of `frame` (H, W, 3)."""
    pooled = _pool(frame)[None]  # (1, h, w, 3)
    dist = np.linalg.norm(_pooled_backgrounds(frame.shape[0]) - pooled, axis=-1)  # (B, h, w)
    # Counting matching blocks, not averaging distances, ignores objects, faces and walls.
    return BACKGROUNDS[int(np.argmax((dist < 25.0).mean(axis=(1, 2))))]


def _label(cls: np.ndarray) -> np.ndarray:
    """Connected components (4-neighbour, torus) of equal non-negative class values.

    Min-label propagation with pointer jumping; returns per-pixel labels, -1 off-class.
    """
    h, w = cls.shape
    fg = cls >= 0
    big = h * w
    lab = np.where(fg, np.arange(big).reshape(h, w), big)
    same = [(np.roll(cls, sh, ax) == cls) & fg for ax in (0, 1) for sh in (1, -1)]
    for _ in range(h + w):
        new = lab
        for (ax, sh), ok in zip([(a, s) for a in (0, 1) for s in (1, -1)], same, strict=True):
            new = np.where(ok, np.minimum(new, np.roll(lab, sh, ax)), new)
        flat = np.append(new.ravel(), big)
        new = flat[new]  # jump to the label's own label: log-depth convergence
        if np.array_equal(new, lab):
            break
        lab = new
    return np.where(fg, lab, -1)


def _unwrapped(coords: np.ndarray, size: int) -> np.ndarray:
    """Coordinates of a component that crosses an edge, moved onto one side of it."""
    if coords.min() == 0 and coords.max() == size - 1:
        return np.where(coords < size / 2, coords + size, coords)
    return coords


def _shape_of(ys: np.ndarray, xs: np.ndarray) -> str:
    """Shape from how full the four corners of the bounding box are.

    A square fills all four, a ball none (about a third of each corner window), the apex-up
    triangle only the bottom two. Corners survive blur better than a whole-box fill ratio.
    """
    m = np.zeros((np.ptp(ys) + 1, np.ptp(xs) + 1), bool)  # (h, w) component mask
    m[ys - ys.min(), xs - xs.min()] = True
    ch, cw = max(1, round(0.25 * m.shape[0])), max(1, round(0.25 * m.shape[1]))
    top = (m[:ch, :cw].mean() + m[:ch, -cw:].mean()) / 2
    bottom = (m[-ch:, :cw].mean() + m[-ch:, -cw:].mean()) / 2
    if top > 0.6 and bottom > 0.6:
        return "square"
    return "triangle" if bottom > top + 0.25 else "ball"


def find_objects(frame: np.ndarray, spec_background: str, min_area: int | None = None) -> list[Detection]:
    """Objects in `frame` (H, W, 3) drawn over background `spec_background`, largest first."""
    size = frame.shape[0]
    min_area = min_area if min_area is not None else int(40 * scale_of(size) ** 2)
    img = frame.astype(np.float32)
    fg = np.linalg.norm(img - background_image(spec_background, size), axis=-1) > FG_THRESHOLD
    # Palette distances only for foreground pixels: objects cover a few percent of a frame.
    pal_dist = np.linalg.norm(img[fg][:, None, :] - _PALETTE, axis=-1)  # (N, K)
    cls = np.full(fg.shape, -1)
    cls[fg] = np.where(pal_dist.min(axis=-1) < PALETTE_MAX, np.argmin(pal_dist, axis=-1), -1)
    lab = _label(cls)
    ids, counts = np.unique(lab[lab >= 0], return_counts=True)
    out = []
    for i in ids[counts >= min_area]:
        ys, xs = np.nonzero(lab == i)
        ys, xs = _unwrapped(ys, size), _unwrapped(xs, size)
        out.append(Detection(_PALETTE_NAMES[cls.flat[i]], _shape_of(ys, xs),
                             (float(xs.mean() % size), float(ys.mean() % size)), len(xs)))
    return sorted(out, key=lambda d: -d.area)


def classify_motion(track: np.ndarray, size: int) -> str | None:
    """Motion name of a centroid track (T, 2) with NaN where the object was not found; None
    when fewer than two frame-to-frame steps are known (the object found in both frames)."""
    steps = np.diff(track, axis=0)
    steps = (steps + size / 2) % size - size / 2  # a wrap-around jump is a small step back
    steps = steps[~np.isnan(steps).any(axis=1)]
    if len(steps) < 2:
        return None
    mx, my = np.median(np.abs(steps), axis=0)
    if max(mx, my) < 0.6 * scale_of(size):
        return "still"
    if min(mx, my) > 0.5 * max(mx, my):
        return "bounce"
    if mx > my:
        return "right" if np.median(steps[:, 0]) > 0 else "left"
    return "down" if np.median(steps[:, 1]) > 0 else "up"


def read_objects(frame: np.ndarray, spec: SceneSpec) -> list[Detection | None]:
    """For each object of `spec`, the largest object of its colour in `frame`, or None: what the
    story scores (and benchmarks/shapes.py) judge its shape and track by."""
    found = find_objects(frame, spec.background)
    return [next((d for d in found if d.color == obj.color), None) for obj in spec.objects]


def object_tracks(reads: list[list[Detection | None]]) -> np.ndarray:
    """Per-frame `read_objects` results -> each object's centre track (objects, T, 2), NaN where
    it was not found."""
    tracks = np.full((len(reads[0]) if reads else 0, len(reads), 2), np.nan)
    for t, seen_all in enumerate(reads):
        for i, seen in enumerate(seen_all):
            if seen is not None:
                tracks[i, t] = seen.centre
    return tracks


def score_story(frames: np.ndarray, spec: SceneSpec) -> dict[str, float]:
    """Adherence of story frames (T, H, W, 3) to `spec`.

    A frame adheres when its background is right and every object of the prompt is found
    with its colour and shape. Motion is right when the object's track reads as its motion.
    """
    size = frames.shape[1]
    bg_ok, obj_ok, shape_ok, colour_ok = [], [], [], []
    reads = [read_objects(frame, spec) for frame in frames]
    for frame, seen_all in zip(frames, reads, strict=True):
        bg_ok.append(background_of(frame) == spec.background)
        ok_all = True
        for obj, seen in zip(spec.objects, seen_all, strict=True):
            hit = seen is not None and seen.shape == obj.shape
            colour_ok.append(seen is not None)
            shape_ok.append(hit)
            ok_all = ok_all and hit
        obj_ok.append(ok_all)
    motions = [classify_motion(tr, size) for tr in object_tracks(reads)]
    motion_ok = [m == o.motion for m, o in zip(motions, spec.objects, strict=True)]
    return {
        "adherence": float(np.mean(np.array(bg_ok) & np.array(obj_ok))),
        "background": float(np.mean(bg_ok)),
        "objects": float(np.mean(obj_ok)),
        "shape_and_colour": float(np.mean(shape_ok)),
        "colour": float(np.mean(colour_ok)),  # the object's colour seen, whatever its shape
        "motion": float(np.mean(motion_ok)),
    }


def character_centroid(frame: np.ndarray, color: str) -> tuple[float, float] | None:
    """Centre (x, y) of the game character of palette `color` inside the arena, or None."""
    size = frame.shape[0]
    w = wall_width(size)
    inner = frame[w:-w, w:-w].astype(np.float32)
    mask = np.linalg.norm(inner - np.array(COLORS[color], np.float32), axis=-1) < 60.0
    if mask.sum() < 20 * scale_of(size) ** 2:
        return None
    ys, xs = np.nonzero(mask)
    return float(xs.mean() + w), float(ys.mean() + w)


def score_game(frames: np.ndarray, actions: np.ndarray, spec: SceneSpec) -> dict[str, float]:
    """How game frames (T, H, W, 3) follow `actions` (T,): move/stand accuracy, response lag.

    Steps into a wall are skipped: the character rightly cannot move there.
    """
    assert spec.character_color is not None
    size = frames.shape[1]
    s = scale_of(size)
    lo, hi = wall_width(size) + 10 * s, size - wall_width(size) - 10 * s
    cents = [character_centroid(f, spec.character_color) for f in frames]
    track = np.array([c if c is not None else (np.nan, np.nan) for c in cents])  # (T, 2)
    dirs = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}
    moved, stood = [], []
    correct, scored = np.zeros(len(frames), bool), np.zeros(len(frames), bool)
    for t in range(1, len(frames)):
        step, prev, a = track[t] - track[t - 1], track[t - 1], int(actions[t])
        if np.isnan(step).any():
            continue
        if a == 0:
            stood.append(np.hypot(*step) < 1.0 * s)
            continue
        dx, dy = dirs[a]
        ax, sign = (0, dx) if dx else (1, dy)
        # Within one step (3 px) of a wall a short or no move is right; the centroid of a
        # rasterised sprite is too coarse to tell, so those steps are not scored.
        if (sign < 0 and prev[ax] <= lo + 3 * s) or (sign > 0 and prev[ax] >= hi - 3 * s):
            continue
        correct[t], scored[t] = step[ax] * sign > 1.5 * s, True
        moved.append(correct[t])
    lags, presses = [], 0  # frames from a new key press to the first frame that moves that way
    for t in range(1, len(frames)):
        if actions[t] != 0 and actions[t] != actions[t - 1]:
            held = np.nonzero(actions[t:] != actions[t])[0]
            end = held[0] if len(held) else len(frames) - t
            if not scored[t : t + end].any():  # pressed against a wall: nothing to see
                continue
            presses += 1
            run = np.nonzero(correct[t:])[0]
            if len(run) and run[0] < end:
                lags.append(run[0])
    return {
        "move": float(np.mean(moved)) if moved else float("nan"),
        "stand": float(np.mean(stood)) if stood else float("nan"),
        "response_frames": float(np.median(lags)) if lags else float("nan"),
        "responded": len(lags) / presses if presses else float("nan"),  # presses that moved
        "found": float(np.mean([c is not None for c in cents])),
    }


def mouth_opening(frame: np.ndarray, spec: SceneSpec | None = None) -> float:
    """Avatar mouth opening 0..1 from the height of the dark mouth region (0 = closed line)."""
    size = frame.shape[0]
    s = scale_of(size)
    y0, y1 = int(0.6 * size), int(0.84 * size)
    x0, x1 = int(0.3 * size), int(0.7 * size)
    region = frame[y0:y1, x0:x1].astype(np.float32)
    dark = np.linalg.norm(region - np.array(MOUTH_COLOR, np.float32), axis=-1) < 40.0
    rows = (dark.sum(axis=1) >= 2).sum()
    closed = 2 * s
    return float(np.clip((rows - closed) / (0.16 * size - closed), 0.0, 1.0))


def eyes_open(frame: np.ndarray, spec: SceneSpec | None = None) -> bool:
    """Whether the avatar's eye whites are visible."""
    size = frame.shape[0]
    band = frame[int(0.38 * size) : int(0.62 * size), int(0.2 * size) : int(0.8 * size)].astype(np.float32)
    white = np.linalg.norm(band - np.array(EYE_WHITE, np.float32), axis=-1) < 30.0
    return bool(white.sum() > 20 * scale_of(size) ** 2)


def score_avatar(frames: np.ndarray, controls: np.ndarray, spec: SceneSpec) -> dict[str, float]:
    """Mouth correlation / mean error against controls (T, 2) and blink accuracy."""
    mouth = np.array([mouth_opening(f, spec) for f in frames])
    target = controls[:, 0].astype(np.float64)
    corr = float(np.corrcoef(mouth, target)[0, 1]) if mouth.std() > 0 and target.std() > 0 else 0.0
    eyes = np.array([eyes_open(f, spec) for f in frames])
    return {
        "mouth_corr": corr,
        "mouth_mae": float(np.abs(mouth - target).mean()),
        "eyes": float(np.mean(eyes == (controls[:, 1] >= 0.5))),
    }



def _swap_colours(frames: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Frames with every palette colour replaced by another (a cyclic shift of the palette)."""
    k = int(rng.integers(1, len(_PALETTE_NAMES)))
    out = frames.copy()
    for i, rgb in enumerate(_PALETTE.astype(np.uint8)):
        out[np.all(frames == rgb, axis=-1)] = _PALETTE[(i + k) % len(_PALETTE)].astype(np.uint8)
    return out


def self_check(rng: np.random.Generator, n_clips: int = 8, size: int = 128) -> dict[str, float]:
    """Score ground-truth clips (should be near perfect) and scrambled ones (near chance).

    Scrambles: story frames shuffled in time with object colours swapped; game actions
    shuffled against their frames; avatar frames shuffled against their controls.
    """
    from .world import sample_clip  # the renderer is needed only here, not to score frames

    acc: dict[str, list[float]] = {}

    def add(prefix: str, scores: dict[str, float]) -> None:
        for k, v in scores.items():
            acc.setdefault(f"{prefix}_{k}", []).append(v)

    for _ in range(n_clips):
        clip = sample_clip(rng, 24, 8, size=size, kind="story", switch_prob=0.0)
        add("story", score_story(clip.frames, clip.specs[0]))
        scrambled = _swap_colours(clip.frames[rng.permutation(len(clip.frames))], rng)
        add("scrambled_story", score_story(scrambled, clip.specs[0]))

        clip = sample_clip(rng, 48, 8, size=size, kind="game", switch_prob=0.0)
        add("game", score_game(clip.frames, clip.actions, clip.specs[0]))
        add("scrambled_game", score_game(clip.frames, rng.permutation(clip.actions), clip.specs[0]))

        clip = sample_clip(rng, 48, 8, size=size, kind="avatar", switch_prob=0.0)
        add("avatar", score_avatar(clip.frames, clip.controls, clip.specs[0]))
        shuffled = clip.frames[rng.permutation(len(clip.frames))]
        add("scrambled_avatar", score_avatar(shuffled, clip.controls, clip.specs[0]))
    return {k: float(np.nanmean(v)) if not np.all(np.isnan(v)) else float("nan") for k, v in acc.items()}
