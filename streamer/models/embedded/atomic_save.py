"""Run checkpoints written so that a job killed mid-save (a session's end) leaves the last whole one."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def save_atomically(obj: object, path: Path) -> None:
    """torch.save to a temporary file beside `path`, then rename it over `path` (atomic on POSIX):
    `path` always holds either the previous checkpoint or this one, never a truncated file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
