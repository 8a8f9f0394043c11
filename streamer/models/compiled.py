"""Checks before torch.compile is switched on: its backend must be able to build code here.

Inductor writes C++ (OpenMP) for the CPU and Triton for CUDA, and builds it on the first call of
each graph. Without a C++ compiler (or without triton on a GPU) that first call fails deep inside
the engine thread; checking up front turns it into a clear error before any weight is read, the
way an unsupported precision is reported (streamer/models/precision.py).
"""

from __future__ import annotations

import importlib.util

import torch


class CompileError(ValueError):
    """torch.compile was asked for where its backend cannot build code."""


# torch.compile's modes. "reduce-overhead" also records CUDA graphs of the compiled code (one
# replay instead of a launch per kernel), which only a GPU has.
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_compile_backend(device: torch.device, mode: str = "default") -> None:
    if mode not in MODES:
        raise CompileError(f"compile mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "reduce-overhead" and device.type != "cuda":
        raise CompileError("compile mode 'reduce-overhead' records CUDA graphs: it needs a model on a GPU")
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            raise CompileError("--compile on a GPU needs triton (pip install 'streamer[triton]')")
        return
    from torch._inductor.cpp_builder import get_cpp_compiler  # the search inductor itself makes
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        get_cpp_compiler()  # runs `<cxx> --version` for each candidate (CXX, then g++)
    except InvalidCxxCompiler as exc:
        raise CompileError("--compile on the CPU needs a C++ compiler for torch.compile's inductor "
                           "backend, and none ran (install g++ or set CXX), or drop --compile") from exc
