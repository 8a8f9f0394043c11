"""Files written so that a job killed mid-write (every background job at a session's end) leaves
the previous whole file: run checkpoints, exported weights and their JSON records, and the
recipe's copies into the shipped folders."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` writes a temporary file beside `path`, which is then renamed over `path`
    (atomic on POSIX): `path` always holds either its previous content or the new, never a
    truncated file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_atomically(obj: object, path: Path) -> None:
    """torch.save through write_atomically."""
    write_atomically(path, lambda tmp: torch.save(obj, tmp))


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text))


def copy_atomically(source: Path, path: Path) -> None:
    write_atomically(path, lambda tmp: shutil.copyfile(source, tmp))
