"""Ground-truth renderer of the embedded model's procedural world, and its clip sampler.

`World` is one stream's state: story objects that move by their prompt's motion, a game
character that follows action keys inside a walled arena, or an avatar face whose mouth and
eyes follow control values. `sample_clip` rolls a World out with random prompts, prompt
switches (redirects), action walks and speech-like controls: unlimited training data.
Pure numpy; one 10-frame 128x128 clip takes a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scenery import (
    DARK,
    EYE_WHITE,
    MOUTH_COLOR,
    arena_image,
    background_image,
    paint,
    paint_ellipse,
    scale_of,
    wall_width,
)
from .vocab import ACTIONS, COLORS, HAIRS, KINDS, SKINS, TWO_OBJECT_SHARE, SceneSpec, describe, random_spec

FPS = 24
_DIRS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}


@dataclass(frozen=True)
class WorldState:
    """Ground truth of the last rendered frame, in pixels (x, y)."""

    objects: tuple[tuple[float, float], ...]  # story object centres
    character: tuple[float, float] | None  # game character centre
    mouth: float | None  # avatar mouth opening 0..1
    eyes_open: bool | None


@dataclass
class Clip:
    """A training clip: T frames in T // chunk_frames chunks, one prompt per chunk."""

    frames: np.ndarray  # (T, H, W, 3) uint8
    prompts: list[str]  # (T // chunk_frames,)
    actions: np.ndarray  # (T,) int64, index into ACTIONS
    controls: np.ndarray  # (T, 2) float32: (mouth 0..1, eyes 0..1; < 0.5 closed)
    specs: list[SceneSpec]  # the spec behind each prompt, for evaluation


class World:
    """Stateful renderer of one stream; `step` returns the next frame."""

    def __init__(self, spec: SceneSpec, rng: np.random.Generator, size: int = 128) -> None:
        self.size = size
        self.rng = rng
        s = scale_of(size)
        self._speed = 2.5 * s
        self._pos = np.zeros((0, 2))  # (N, 2) story object centres (x, y)
        self._vel = np.zeros((0, 2))
        self._half = np.zeros(0)
        wall = wall_width(size)
        self._char_half = 10 * s
        lo, hi = wall + self._char_half, size - wall - self._char_half
        self._char_bounds = (lo, hi)
        # The character spawns near the centre, as the head does: with a spawn anywhere in the arena
        # the first chunk, denoised from pure noise towards the mean image, showed no character.
        self._char = np.clip(size / 2 + rng.uniform(-8, 8, size=2) * s, lo, hi)
        self._facing = (1.0, 0.0)
        # The head sits at a small per-stream offset so the model cannot memorise one picture.
        self._head = (size / 2 + rng.uniform(-3, 3) * s, size * 0.54 + rng.uniform(-3, 3) * s)
        self._mouth = 0.0
        self._eyes = True
        self.spec = spec
        self.set_spec(spec)

    def set_spec(self, spec: SceneSpec) -> None:
        """Redirect: new colours/shapes/motions/background from the next frame, same positions."""
        self.spec = spec
        n_old, n_new = len(self._pos), len(spec.objects)
        s = scale_of(self.size)
        half = np.concatenate([self._half[:n_new], self.rng.uniform(9, 13, size=max(0, n_new - n_old)) * s])
        pos = np.concatenate([self._pos[:n_new], self._fresh_positions(half[n_old:], self._pos[:n_new])])
        vel = np.zeros((n_new, 2))
        for i, obj in enumerate(spec.objects):
            if obj.motion == "bounce":
                old = self._vel[i] if i < n_old else np.zeros(2)
                signs = np.where(old != 0, np.sign(old), self.rng.choice([-1.0, 1.0], size=2))
                vel[i] = signs * self._speed / np.sqrt(2)
            elif obj.motion in _DIRS:
                vel[i] = np.array(_DIRS[obj.motion]) * self._speed
            if obj.motion in ("bounce", "still"):  # these never wrap: pull fully into view
                pos[i] = np.clip(pos[i], half[i], self.size - half[i])
        self._pos, self._vel, self._half = pos, vel, half
        if spec.kind == "avatar":
            self._face = self._draw_face_base(spec)

    def _fresh_positions(self, halves: np.ndarray, taken: np.ndarray) -> np.ndarray:
        out: list[np.ndarray] = []
        for h in halves:
            best = self.rng.uniform(h, self.size - h, size=2)
            for _ in range(8):  # start apart from the others when there is room
                others = [*taken, *out]
                if all(np.hypot(*(best - o)) > 2.2 * h + 4 for o in others):
                    break
                best = self.rng.uniform(h, self.size - h, size=2)
            out.append(best)
        return np.array(out).reshape(-1, 2)

    @property
    def state(self) -> WorldState:
        k = self.spec.kind
        return WorldState(
            objects=tuple((float(x), float(y)) for x, y in self._pos) if k == "story" else (),
            character=(float(self._char[0]), float(self._char[1])) if k == "game" else None,
            mouth=self._mouth if k == "avatar" else None,
            eyes_open=self._eyes if k == "avatar" else None,
        )

    def step(self, action: int = 0, control: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
        """Advance one frame (the action/control applies to this frame) and render it."""
        kind = self.spec.kind
        if kind == "story":
            self._advance_objects()
            return self._render_story()
        if kind == "game":
            self._advance_character(int(action))
            return self._render_game()
        self._mouth = float(np.clip(control[0], 0.0, 1.0))
        self._eyes = bool(control[1] >= 0.5)
        return self._render_avatar()

    # -- story -----------------------------------------------------------------------------
    def _advance_objects(self) -> None:
        self._pos = self._pos + self._vel
        for i, obj in enumerate(self.spec.objects):
            if obj.motion == "bounce":
                h = self._half[i]
                for a in (0, 1):  # reflect off the walls, keeping the overshoot
                    if self._pos[i, a] < h:
                        self._pos[i, a], self._vel[i, a] = 2 * h - self._pos[i, a], abs(self._vel[i, a])
                    elif self._pos[i, a] > self.size - h:
                        self._pos[i, a] = 2 * (self.size - h) - self._pos[i, a]
                        self._vel[i, a] = -abs(self._vel[i, a])
            elif obj.motion in _DIRS:  # torus: whatever leaves one side re-enters the other
                self._pos[i] %= self.size

    def _render_story(self) -> np.ndarray:
        frame = background_image(self.spec.background, self.size).copy()  # (H, W, 3)
        for (x, y), h, obj in zip(self._pos, self._half, self.spec.objects, strict=True):
            paint(frame, x, y, h, obj.shape, COLORS[obj.color])
        return frame

    # -- game ------------------------------------------------------------------------------
    def _advance_character(self, action: int) -> None:
        if not 0 <= action < len(ACTIONS):
            raise ValueError(f"action {action} out of range 0..{len(ACTIONS) - 1}")
        if action == 0:
            return
        d = _DIRS[ACTIONS[action]]
        self._facing = d
        lo, hi = self._char_bounds
        self._char = np.clip(self._char + np.array(d) * 3 * scale_of(self.size), lo, hi)

    def _render_game(self) -> np.ndarray:
        assert self.spec.character_color is not None
        frame = arena_image(self.spec.background, self.size).copy()  # (H, W, 3)
        s = scale_of(self.size)
        x, y = self._char
        paint(frame, x, y, self._char_half / 0.85, "square", COLORS[self.spec.character_color], wrap=False)
        # The eye looks where the character last moved: a cue for the direction it faces.
        fx, fy = self._facing
        ex, ey = x + 5 * s * fx, y + 5 * s * fy - (3 * s if fy == 0 else 0)
        paint(frame, ex, ey, 3.2 * s, "ball", EYE_WHITE, wrap=False)
        paint(frame, ex + fx * s, ey + fy * s, 1.6 * s, "ball", DARK, wrap=False)
        return frame

    # -- avatar ----------------------------------------------------------------------------
    def _draw_face_base(self, spec: SceneSpec) -> np.ndarray:
        assert spec.skin is not None and spec.hair is not None
        frame = background_image(spec.background, self.size).copy()
        cx, cy = self._head
        n = self.size
        paint(frame, cx, cy, 0.35 * n, "ball", SKINS[spec.skin], wrap=False)
        # Hair: the top of a slightly larger circle, as a cap above the forehead.
        cap = background_image(spec.background, self.size).copy()
        paint(cap, cx, cy, 0.37 * n, "ball", HAIRS[spec.hair], wrap=False)
        top = int(cy - 0.13 * n)
        frame[:top] = cap[:top]
        return frame

    def _render_avatar(self) -> np.ndarray:
        frame = self._face.copy()  # (H, W, 3)
        cx, cy = self._head
        n, s = self.size, scale_of(self.size)
        for side in (-1, 1):
            ex, ey = cx + side * 0.13 * n, cy - 0.04 * n
            if self._eyes:
                paint(frame, ex, ey, 0.055 * n, "ball", EYE_WHITE, wrap=False)
                paint(frame, ex, ey, 0.028 * n, "ball", DARK, wrap=False)
            else:
                paint_ellipse(frame, ex, ey, 0.06 * n, 1.0 * s, DARK)
        # Mouth height is linear in the control: a 2 px line when closed, 0.16*size wide open.
        closed = 2 * s
        height = closed + self._mouth * (0.16 * n - closed)
        paint_ellipse(frame, cx, np.floor(cy + 0.17 * n) + 0.5, 0.11 * n, height / 2, MOUTH_COLOR)
        return frame


def _action_walk(rng: np.random.Generator, t: int) -> np.ndarray:
    """Actions held for 2..12 frames each; "none" about 20% of holds."""
    out = np.zeros(t, np.int64)
    i = 0
    while i < t:
        hold = int(rng.integers(2, 13))
        out[i : i + hold] = 0 if rng.random() < 0.2 else int(rng.integers(1, len(ACTIONS)))
        i += hold
    return out


def _speech_controls(rng: np.random.Generator, t: int) -> np.ndarray:
    """(T, 2) float32: a speech-like mouth signal and eyes that blink every 1-3 s."""
    time = np.arange(t) / FPS
    f1, f2 = rng.uniform(1.0, 3.0), rng.uniform(3.0, 6.0)
    p1, p2 = rng.uniform(0, 2 * np.pi, size=2)
    mouth = 0.45 + 0.3 * np.sin(2 * np.pi * f1 * time + p1) + 0.2 * np.sin(2 * np.pi * f2 * time + p2)
    i = 0
    while i < t:  # piecewise offsets (syllable jumps) and silent pauses with the mouth shut
        seg = int(rng.integers(4, 25))
        mouth[i : i + seg] = 0.0 if rng.random() < 0.15 else mouth[i : i + seg] + rng.uniform(-0.35, 0.35)
        i += seg
    eyes = np.ones(t)
    i = int(rng.integers(0, 2 * FPS))
    while i < t:
        eyes[i : i + int(rng.integers(2, 5))] = 0.0
        i += int(rng.integers(FPS, 3 * FPS))
    return np.stack([np.clip(mouth, 0.0, 1.0), eyes], axis=1).astype(np.float32)


def sample_clip(rng: np.random.Generator, num_frames: int, chunk_frames: int, size: int = 128,
                kind: str | None = None, switch_prob: float = 0.2, two_objects: float = TWO_OBJECT_SHARE) -> Clip:
    """Render one random clip; at each later chunk boundary the prompt may switch (redirect).
    `two_objects`: the share of story scenes with two objects (vocab.random_spec).

    Actions and controls are drawn for every kind, not only the kind that reads them, so
    the model learns that a story ignores keys and a game ignores the mouth signal.
    """
    if num_frames % chunk_frames:
        raise ValueError(f"num_frames {num_frames} is not a multiple of chunk_frames {chunk_frames}")
    kind = kind or str(rng.choice(KINDS))
    spec = random_spec(rng, kind, two_objects)
    world = World(spec, rng, size)
    actions = _action_walk(rng, num_frames)
    controls = _speech_controls(rng, num_frames)
    frames = np.empty((num_frames, size, size, 3), np.uint8)  # (T, H, W, 3)
    prompts: list[str] = []
    specs: list[SceneSpec] = []
    for c in range(num_frames // chunk_frames):
        if c > 0 and rng.random() < switch_prob:
            new = random_spec(rng, kind, two_objects)
            while new == spec:  # a switch must change something, or it teaches nothing
                new = random_spec(rng, kind, two_objects)
            spec = new
            world.set_spec(spec)
        prompts.append(describe(spec))
        specs.append(spec)
        for t in range(c * chunk_frames, (c + 1) * chunk_frames):
            frames[t] = world.step(int(actions[t]), (float(controls[t, 0]), float(controls[t, 1])))
    return Clip(frames, prompts, actions, controls, specs)
