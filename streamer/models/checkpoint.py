"""Checking a state dict against the model a config builds, with errors naming file and key."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def check_state_dict(expected: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], source: str,
                     error: type[Exception] = ValueError) -> None:
    """Raise `error` naming `source` and the first missing, unexpected or mis-shaped key."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        raise error(f"{source}: missing key '{missing[0]}' ({len(missing)} missing)")
    if unexpected:
        raise error(f"{source}: unexpected key '{unexpected[0]}' ({len(unexpected)} unexpected)")
    for key, value in expected.items():
        if state[key].shape != value.shape:
            raise error(f"{source}: key '{key}' has shape {tuple(state[key].shape)}, its config "
                        f"expects {tuple(value.shape)}")
