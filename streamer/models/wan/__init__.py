"""Causal Wan-2.1 adapter (Self-Forcing / CausVid / LongLive checkpoints) on diffusers' Wan classes.

Needs the `wan` extra: `pip install 'streamer[wan]'` (diffusers, transformers). Importing this
package without them raises an ImportError that says so.
"""

from __future__ import annotations

try:
    import diffusers  # noqa: F401
    import transformers  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the wan-causal model needs diffusers and transformers: pip install 'streamer[wan]'"
    ) from exc

from .config import CausalConfig, WanLoadError
from .model import WanCausalModel
from .tiny import tiny_random

__all__ = ["CausalConfig", "WanCausalModel", "WanLoadError", "tiny_random"]
