"""Static pictures and drawing primitives of the procedural world.

Shared by the renderer (`world.py`) and the pixel evaluator (`evaluate.py`): the evaluator
subtracts the very same background image the renderer painted, so foreground detection needs
no learned background model. Everything here is vectorised numpy; backgrounds are cached per
(name, size) and returned read-only, so a frame starts as one memcpy.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .vocab import BACKGROUNDS

WALL_COLOR = (105, 70, 40)  # game arena wall: brown, far from every object colour
EYE_WHITE = (250, 250, 250)
DARK = (30, 20, 20)  # pupils and closed-eye lines
MOUTH_COLOR = (70, 15, 25)

# Base colour of each background; texture is added on top in `background_image`.
BACKGROUND_BASE: dict[str, tuple[int, int, int]] = {
    "sky": (120, 170, 225),
    "night": (20, 25, 70),
    "grass": (50, 110, 40),
    "sea": (20, 105, 140),
    "sand": (215, 195, 145),
    "gray": (128, 128, 128),
    "black": (8, 8, 8),
}
assert set(BACKGROUND_BASE) == set(BACKGROUNDS)


def scale_of(size: int) -> float:
    """World lengths are specified at 128 px and scale with the frame size."""
    return size / 128.0


@lru_cache(maxsize=64)
def background_image(name: str, size: int) -> np.ndarray:
    """The (size, size, 3) uint8 background `name`; read-only, copy before drawing."""
    s = scale_of(size)
    y = np.arange(size, dtype=np.float32)[:, None] / s  # in 128-px units so textures scale
    x = np.arange(size, dtype=np.float32)[None, :] / s
    base = np.array(BACKGROUND_BASE[name], np.float32)
    img = np.broadcast_to(base, (size, size, 3)).copy()  # (H, W, 3)
    # A fixed-seed texture: the same every stream, so the evaluator can subtract it exactly.
    tex = np.random.default_rng(1234 + BACKGROUNDS.index(name))
    if name == "sky":  # darker at the top, lighter at the horizon
        img += (y / 128.0)[..., None] * np.array([40, 35, 15], np.float32)
    elif name == "night":  # a few fixed stars
        n = 28
        ys = (tex.random(n) * size).astype(int)
        xs = (tex.random(n) * size).astype(int)
        r = max(1, round(s))
        for dy in range(r):
            for dx in range(r):
                img[np.clip(ys + dy, 0, size - 1), np.clip(xs + dx, 0, size - 1)] = (230, 230, 200)
    elif name == "grass":  # mown stripes
        img += ((np.floor(y / 8) % 2) * 10)[..., None]
    elif name == "sea":  # horizontal wave bands with a small wobble
        img += (10 * np.sin(2 * np.pi * y / 12 + 0.8 * np.sin(2 * np.pi * x / 32)))[..., None]
    elif name == "sand":  # sparse darker grains
        grains = tex.random((size, size)) < 0.04
        img[grains] -= 25
    out = np.clip(img, 0, 255).astype(np.uint8)
    out.flags.writeable = False
    return out


@lru_cache(maxsize=64)
def arena_image(name: str, size: int) -> np.ndarray:
    """Background `name` framed by the game's wall; read-only."""
    img = background_image(name, size).copy()
    w = wall_width(size)
    img[:w], img[-w:], img[:, :w], img[:, -w:] = WALL_COLOR, WALL_COLOR, WALL_COLOR, WALL_COLOR
    img.flags.writeable = False
    return img


def wall_width(size: int) -> int:
    return max(1, round(4 * scale_of(size)))


def shape_mask(shape: str, dy: np.ndarray, dx: np.ndarray, half: float) -> np.ndarray:
    """Boolean mask of `shape` of half-extent `half` at offsets (dy (h, 1), dx (1, w))."""
    if shape == "ball":
        return dy * dy + dx * dx <= half * half
    if shape == "square":  # side 1.7*half: about the ball's area
        return (np.abs(dy) <= 0.85 * half) & (np.abs(dx) <= 0.85 * half)
    if shape == "triangle":  # apex up, base 2.3*half wide
        return (dy >= -half) & (dy <= half) & (np.abs(dx) <= 1.15 * half * (dy + half) / (2 * half))
    raise ValueError(f"unknown shape {shape!r}")


def paint(frame: np.ndarray, cx: float, cy: float, half: float, shape: str,
          color: tuple[int, int, int], wrap: bool = True) -> None:
    """Draw `shape` centred at (cx, cy) into frame (H, W, 3) in place.

    Works on a small window around the shape; with `wrap` the window's indices are taken
    modulo the frame, so a shape crossing an edge shows on both sides (torus world).
    """
    size_y, size_x = frame.shape[:2]
    r = int(np.ceil(1.2 * half)) + 1
    iy, ix = int(np.floor(cy)), int(np.floor(cx))
    rows = np.arange(iy - r, iy + r + 2)
    cols = np.arange(ix - r, ix + r + 2)
    mask = shape_mask(shape, (rows - cy)[:, None], (cols - cx)[None, :], half)
    if wrap:
        rows, cols = rows % size_y, cols % size_x
    else:
        keep_r = (rows >= 0) & (rows < size_y)
        keep_c = (cols >= 0) & (cols < size_x)
        mask, rows, cols = mask[keep_r][:, keep_c], rows[keep_r], cols[keep_c]
    rr, cc = np.nonzero(mask)
    frame[rows[rr], cols[cc]] = color


def paint_ellipse(frame: np.ndarray, cx: float, cy: float, a: float, b: float,
                  color: tuple[int, int, int]) -> None:
    """Axis-aligned filled ellipse with half-axes (a, b), clipped to the frame."""
    y0, y1 = max(0, int(cy - b) - 1), min(frame.shape[0], int(cy + b) + 2)
    x0, x1 = max(0, int(cx - a) - 1), min(frame.shape[1], int(cx + a) + 2)
    dy = (np.arange(y0, y1) - cy)[:, None] / b
    dx = (np.arange(x0, x1) - cx)[None, :] / a
    frame[y0:y1, x0:x1][dy * dy + dx * dx <= 1.0] = color
