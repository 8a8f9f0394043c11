"""Triton as an optional, lazily imported backend.

Triton is an optional extra (`pip install -e .[triton]`). `import kernels` never imports it:
it is imported at the first Triton launch. Two reasons: serving on a CPU never pays for it,
and Triton fixes interpreter-or-compiler when it is imported (its own library functions,
`tl.sum`, `tl.max`, ... are decorated then), so importing it when the model imports `kernels`
would freeze the mode before a test has set `TRITON_INTERPRET=1`.

Kernel functions are plain functions with string annotations (`from __future__ import
annotations`) wrapped in `jit` below; their module binds `tl` to None, and `jit` binds it to
`triton.language` in that module and applies `triton.jit` on the first launch.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from typing import Any

INSTALL_HINT = "Triton is not installed: pip install -e .[triton]  (or pip install triton==3.9.0)"

HAS_TRITON = importlib.util.find_spec("triton") is not None
tl: Any = None  # kernel modules import this name; `jit` rebinds it in their namespace


def interpreting() -> bool:
    """True when Triton kernels run through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def require_triton() -> None:
    if not HAS_TRITON:
        raise ImportError(INSTALL_HINT)


@functools.cache
def triton_version() -> str:
    # Cached: dispatch names the version in the reason of every call on CUDA tensors, and a
    # metadata lookup reads the installed packages' files (130 us a call on a CI host), a cost
    # every Triton launch paid before (docs/kernels.md, "First GPU figures").
    from importlib.metadata import version

    return version("triton")


def _import_triton() -> Any:
    require_triton()
    import triton
    import triton.language.standard

    # Triton decided interpreter-or-compiler when it was first imported (maybe by someone else).
    imported_interpreted = type(triton.language.standard.sum).__name__ == "InterpretedFunction"
    if imported_interpreted != interpreting():
        raise RuntimeError(
            f"Triton was imported with TRITON_INTERPRET {'set' if imported_interpreted else 'unset'} "
            f"but is now launched with it {'set' if interpreting() else 'unset'}: Triton fixes the "
            "mode at import, so set TRITON_INTERPRET in the environment the process starts with "
            "(e.g. TRITON_INTERPRET=1 pytest -m kernels)"
        )
    return triton


class jit:  # noqa: N801 - a decorator, like triton.jit
    """`triton.jit`, applied on the first launch (after importing Triton)."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self._kernel: Any = None

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        triton = _import_triton()
        if self._kernel is None:
            self.fn.__globals__["tl"] = triton.language
            self._kernel = triton.jit(self.fn)
        return self._kernel[grid]


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
