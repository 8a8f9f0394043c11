"""Configuration of the embedded model: autoencoder, diffusion transformer, streaming layout.

Configs are plain frozen dataclasses stored as JSON beside the weights. Loading checks every
field, so a mismatch names the file and the field instead of failing deep inside torch.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic_save import write_text_atomically


class ConfigError(ValueError):
    """A config file is missing, malformed, or does not match the weights."""


@dataclass(frozen=True)
class AutoencoderConfig:
    image_size: int = 128
    latent_channels: int = 8
    downsample: int = 8  # image_size / latent grid
    enc_channels: int = 128
    dec_channels: int = 96
    dec_mid_channels: int = 48
    # Decoder depth (docs/model.md, Autoencoder): residual blocks at the latent grid and at twice
    # it, and the channels of an optional stage at four times it (0: none; pixel shuffle by f/2).
    dec_blocks: int = 1
    dec_mid_blocks: int = 0
    dec_fine_channels: int = 0


@dataclass(frozen=True)
class DiTConfig:
    latent_channels: int = 8
    latent_size: int = 16
    patch: int = 2
    dim: int = 128
    depth: int = 8
    heads: int = 2
    mlp_ratio: float = 4.0
    text_layers: int = 2
    vocab_size: int = 128  # >= len(WORDS) + 2 (padding and BOS)
    max_tokens: int = 16
    num_actions: int = 5
    control_dim: int = 2
    max_frames: int = 64  # size of the temporal RoPE table

    @property
    def tokens_per_frame(self) -> int:
        return (self.latent_size // self.patch) ** 2

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


@dataclass(frozen=True)
class EmbeddedConfig:
    autoencoder: AutoencoderConfig = field(default_factory=AutoencoderConfig)
    dit: DiTConfig = field(default_factory=DiTConfig)
    frames_per_chunk: int = 2
    sink_frames: int = 2
    window_frames: int = 4
    fps: float = 24.0
    # Evenly spaced steps warped by shift 3 (t' = 3t / (1 + 2t)): see docs/model.md, "Sampling schedule".
    timesteps: tuple[float, ...] = (1.0, 0.9, 0.75, 0.5)
    timestep_shift: float = 3.0  # the same warp for any other step count (ModelSpec.schedule)
    latent_scale: float = 1.0  # multiplies encoder output so latents have unit variance
    # Classifier-free guidance (see docs/model.md, "Guidance"): 1.0 is off. Only samples at
    # t >= guidance_min_t are guided, i.e. the first steps of a chunk, where its layout is made.
    guidance_scale: float = 1.0
    guidance_min_t: float = 0.0
    # The guidance scale distillation baked into the weights (1.0: none): such a model follows its
    # prompt that strongly in one pass a step, with guidance_scale 1 (see docs/model.md, "Guidance").
    distilled_guidance_scale: float = 1.0
    # The flow time finished chunks are committed to the cache at (ModelSpec.context_noise; 0:
    # clean). See docs/model.md, "Committing the past slightly noisy".
    context_noise: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.context_noise < 1.0:
            raise ConfigError(f"field 'context_noise' must be in [0, 1), got {self.context_noise}")

    @property
    def context_frames(self) -> int:
        return self.sink_frames + self.window_frames

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> EmbeddedConfig:
        def build(kind: type, values: Any, prefix: str) -> Any:
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: field '{prefix}' must be an object")
            names = {f.name: f for f in dataclasses.fields(kind)}
            unknown = sorted(set(values) - set(names))
            if unknown:
                raise ConfigError(f"{source}: unknown field '{prefix}{unknown[0]}'")
            kwargs = {}
            for name, value in values.items():
                if name == "autoencoder":
                    kwargs[name] = build(AutoencoderConfig, value, "autoencoder.")
                elif name == "dit":
                    kwargs[name] = build(DiTConfig, value, "dit.")
                elif name == "timesteps":
                    kwargs[name] = tuple(float(v) for v in value)
                else:
                    kwargs[name] = value
            try:
                return kind(**kwargs)
            except ConfigError as exc:  # a value out of range: name the file too
                raise ConfigError(f"{source}: {exc}") from None

        return build(cls, data, "")

    def save(self, path: Path) -> None:
        write_text_atomically(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> EmbeddedConfig:
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
        return cls.from_dict(data, str(path))


def differing_fields(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted names of the fields where configs `a` and `b` (dataclasses of one kind) differ,
    nested configs field by field: e.g. ["dit.depth", "timesteps"]."""
    out = []
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if dataclasses.is_dataclass(x):
            out += differing_fields(x, y, f"{prefix}{f.name}.")
        elif x != y:
            out.append(f"{prefix}{f.name}")
    return out
