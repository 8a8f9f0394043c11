"""argparse value types and option groups shared by the command lines (serve, eval, train, benchmarks)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer of at least 1 (argparse's error names the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def unit_interval(text: str) -> float:
    """A number in [0, 1), e.g. a flow time short of pure noise (argparse's error names the flag)."""
    value = _number(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def share(text: str) -> float:
    """A number in [0, 1], e.g. the share of clips with two objects."""
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def non_negative(text: str) -> float:
    """A number of at least 0, e.g. a loss weight."""
    value = _number(text)
    if not value >= 0.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def add_guidance_arguments(ap: argparse.ArgumentParser) -> None:
    """--guidance and --guidance-min-t, for EmbeddedModel.configure_guidance (None keeps the config's)."""
    ap.add_argument("--guidance", type=float, default=None,
                    help="classifier-free guidance scale (default: the weights' config; 1 is off)")
    ap.add_argument("--guidance-min-t", type=float, default=None,
                    help="guide only the steps at t >= this (default: the weights' config)")
