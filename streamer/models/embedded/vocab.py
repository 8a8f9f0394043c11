"""Prompt vocabulary of the embedded model: words, scene specs, parsing and canonical text.

The embedded model is trained on a procedural world (`world.py`), so its prompts can only
talk about what that world draws. This module is the single source of truth for that
language: the palettes the renderer and the evaluator share, the fixed token list the model
embeds, and a forgiving parser that turns any text into a valid `SceneSpec` (unknown words
are reported and ignored, missing parts get defaults) so a typo never breaks a stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

KINDS = ("story", "game", "avatar")

# Object / character colours. Saturated on purpose: every one must stay far (in RGB) from
# every background below so the pixel evaluator can pull objects off any scene.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "orange": (250, 140, 20),
    "yellow": (250, 225, 30),
    "green": (40, 200, 60),
    "blue": (40, 70, 230),
    "purple": (140, 50, 190),
    "pink": (250, 130, 200),
    "white": (250, 250, 250),
}
# Backgrounds are muted; their textures live in world.py. No "white" background, because
# white is an object colour.
BACKGROUNDS = ("sky", "night", "grass", "sea", "sand", "gray", "black")
SHAPES = ("ball", "square", "triangle")
MOTIONS = ("left", "right", "up", "down", "still", "bounce")
ACTIONS = ("none", "left", "right", "up", "down")  # action id = index
SKINS: dict[str, tuple[int, int, int]] = {
    "pale": (245, 215, 190),
    "tan": (210, 160, 110),
    "brown": (140, 90, 55),
    "green": (110, 190, 90),
}
HAIRS: dict[str, tuple[int, int, int]] = {
    "black": (25, 20, 15),
    "brown": (105, 60, 25),
    "blond": (240, 210, 110),
    "red": (190, 60, 20),
}

MAX_TOKENS = 16
MAX_OBJECTS = 2

# Synonyms map surface words onto the canonical names above.
SHAPE_WORDS = {"ball": "ball", "circle": "ball", "disc": "ball", "dot": "ball",
               "square": "square", "box": "square", "block": "square", "cube": "square",
               "triangle": "triangle"}
MOTION_WORDS = {"left": "left", "leftward": "left", "leftwards": "left",
                "right": "right", "rightward": "right", "rightwards": "right",
                "up": "up", "upward": "up", "upwards": "up", "rising": "up",
                "down": "down", "downward": "down", "downwards": "down", "falling": "down",
                "still": "still", "static": "still", "resting": "still", "stopped": "still",
                "bounce": "bounce", "bounces": "bounce", "bouncing": "bounce", "bouncy": "bounce"}
COLOR_WORDS = {**{c: c for c in COLORS}, "violet": "purple"}
# Background names plus words that only name a background after "on"/"in" ("on blue").
BACKGROUND_WORDS = {**{b: b for b in BACKGROUNDS}, "grey": "gray", "dark": "night",
                    "ocean": "sea", "water": "sea", "beach": "sand", "desert": "sand",
                    "field": "grass", "meadow": "grass"}
BACKGROUND_AFTER_PREP = {"blue": "sky", "green": "grass", "yellow": "sand"}
PREPOSITIONS = ("on", "in", "over", "against")
AVATAR_MARKERS = ("avatar", "face", "skin", "hair", "head")
GAME_MARKERS = ("game", "character", "player", "sprite")
FILLERS = ("a", "an", "the", "one", "two", "some", "is", "are", "that", "of", "to", "and",
           "with", "moving", "moves", "move", "going", "goes", "flying", "rolling",
           "staying", "standing", "sitting", "around", "scene", "background", "at", "by")

# Token id = index + 1 (0 is padding). New words go at the end of this list (after "blonde"):
# inserting one into a group above would shift every later id and break trained weights.
WORDS: tuple[str, ...] = tuple(dict.fromkeys(
    [*FILLERS, *PREPOSITIONS, *KINDS, *AVATAR_MARKERS, *GAME_MARKERS, *COLOR_WORDS,
     *BACKGROUND_WORDS, *SHAPE_WORDS, *MOTION_WORDS, *SKINS, *HAIRS, "blonde"]))
_TOKEN_ID = {w: i + 1 for i, w in enumerate(WORDS)}


@dataclass(frozen=True)
class ObjectSpec:
    """One story object: palette colour name, shape name, motion name."""

    color: str
    shape: str
    motion: str


@dataclass(frozen=True)
class SceneSpec:
    """What one stream shows. Fields that do not apply to `kind` are None / empty."""

    kind: str
    background: str
    objects: tuple[ObjectSpec, ...] = ()
    character_color: str | None = None
    skin: str | None = None
    hair: str | None = None


@dataclass
class ParsedPrompt:
    """Result of `parse_prompt`: the spec, the model's token ids, and the ignored words.

    `token_objects[i]` is the index in `spec.objects` of the story object token i describes
    (its colour, shape or motion word), -1 for every other token (binding.py trains on it)."""

    spec: SceneSpec
    token_ids: list[int]
    unknown_words: list[str] = field(default_factory=list)
    token_objects: list[int] = field(default_factory=list)


DEFAULT_BACKGROUND = "gray"
DEFAULT_OBJECT = ObjectSpec("white", "ball", "still")
DEFAULT_CHARACTER = "red"
DEFAULT_SKIN, DEFAULT_HAIR = "pale", "black"


def tokenize(text: str) -> list[str]:
    """Lowercase words with punctuation stripped ("Game:" -> "game")."""
    return re.findall(r"[a-z]+", text.lower())


def _kind_of(words: list[str]) -> str:
    if any(w in AVATAR_MARKERS for w in words):
        return "avatar"
    if any(w in GAME_MARKERS for w in words):
        return "game"
    return "story"


def parse_prompt(text: str) -> ParsedPrompt:
    """Map any text to a valid SceneSpec; never raises.

    The spec is read from every word, token_ids keep the first MAX_TOKENS known words.
    """
    words = tokenize(text)
    unknown = [w for w in words if w not in _TOKEN_ID]
    token_ids = [_TOKEN_ID[w] for w in words if w in _TOKEN_ID][:MAX_TOKENS]
    kind = _kind_of(words)
    background: str | None = None
    character: str | None = None
    skin: str | None = None
    hair: str | None = None
    objects: list[dict[str, str]] = []
    word_objects = [-1] * len(words)

    def current(slot: str, i: int) -> dict[str, str]:
        # A word fills the open object unless that slot is taken, which starts a new object.
        if not objects or slot in objects[-1]:
            objects.append({})
        word_objects[i] = len(objects) - 1 if len(objects) <= MAX_OBJECTS else -1
        return objects[-1]

    for i, w in enumerate(words):
        prev = words[i - 1] if i > 0 else ""
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if nxt == "skin" and w in SKINS:
            skin = w
        elif nxt == "hair" and w in HAIRS:
            hair = w
        elif w == "blonde" or (w == "blond"):
            hair = "blond"
        elif w in ("pale", "tan"):
            skin = w
        elif prev in PREPOSITIONS and (w in BACKGROUND_WORDS or w in BACKGROUND_AFTER_PREP):
            background = BACKGROUND_WORDS.get(w) or BACKGROUND_AFTER_PREP[w]
        elif w in BACKGROUND_WORDS and w not in COLOR_WORDS:
            background = BACKGROUND_WORDS[w]
        elif kind == "avatar" and (w in SKINS or w in HAIRS):
            if w in SKINS:
                skin = w
            else:
                hair = w
        elif w in COLOR_WORDS:
            if kind == "game":
                character = character or COLOR_WORDS[w]
            elif kind == "story":
                current("color", i)["color"] = COLOR_WORDS[w]
        elif kind == "story" and w in SHAPE_WORDS:
            current("shape", i)["shape"] = SHAPE_WORDS[w]
        elif kind == "story" and w in MOTION_WORDS:
            current("motion", i)["motion"] = MOTION_WORDS[w]

    bg = background or DEFAULT_BACKGROUND
    if kind == "game":
        spec = SceneSpec("game", bg, character_color=character or DEFAULT_CHARACTER)
    elif kind == "avatar":
        spec = SceneSpec("avatar", bg, skin=skin or DEFAULT_SKIN, hair=hair or DEFAULT_HAIR)
    else:
        objs = tuple(ObjectSpec(o.get("color", DEFAULT_OBJECT.color), o.get("shape", DEFAULT_OBJECT.shape),
                                o.get("motion", DEFAULT_OBJECT.motion)) for o in objects[:MAX_OBJECTS])
        spec = SceneSpec("story", bg, objects=objs or (DEFAULT_OBJECT,))
    token_objects = [o for w, o in zip(words, word_objects, strict=True) if w in _TOKEN_ID][:MAX_TOKENS]
    return ParsedPrompt(spec, token_ids, unknown, token_objects)


def _motion_phrase(motion: str) -> str:
    if motion == "bounce":
        return "bouncing"
    if motion == "still":
        return "staying still"
    return f"moving {motion}"


def describe(spec: SceneSpec) -> str:
    """Canonical prompt for `spec`; `parse_prompt(describe(s)).spec == s` (at most 16 tokens)."""
    if spec.kind == "game":
        return f"game: a {spec.character_color} character on {spec.background}"
    if spec.kind == "avatar":
        return f"avatar: {spec.skin} skin {spec.hair} hair on {spec.background}"
    parts = [f"a {o.color} {o.shape} {_motion_phrase(o.motion)}" for o in spec.objects]
    return " and ".join(parts) + f" on {spec.background}"


TWO_OBJECT_SHARE = 0.3  # story scenes with two objects, in training and evaluation (train --two-objects)


def random_spec(rng: np.random.Generator, kind: str | None = None,
                two_objects: float = TWO_OBJECT_SHARE) -> SceneSpec:
    """A uniformly random scene; story scenes hold 2 objects of different colours in a share
    `two_objects` of draws (default 30 %), 1 otherwise. The evaluator draws at the default."""
    kind = kind or str(rng.choice(KINDS))
    bg = str(rng.choice(BACKGROUNDS))
    if kind == "game":
        return SceneSpec("game", bg, character_color=str(rng.choice(list(COLORS))))
    if kind == "avatar":
        return SceneSpec("avatar", bg, skin=str(rng.choice(list(SKINS))), hair=str(rng.choice(list(HAIRS))))
    if kind != "story":
        raise ValueError(f"unknown scene kind {kind!r}; expected one of {KINDS}")
    n = 1 if rng.random() < 1.0 - two_objects else 2  # at the default, the draws of `< 0.7` before the flag
    colors = rng.choice(list(COLORS), size=n, replace=False)
    objs = tuple(ObjectSpec(str(c), str(rng.choice(SHAPES)), str(rng.choice(MOTIONS))) for c in colors)
    return SceneSpec("story", bg, objects=objs)
