"""One OpenMP worker team per process, so that the engine thread's torch calls run at full speed.

torch's CPU kernels use OpenMP (GNU libgomp on Linux), which keeps a pool of worker threads for
every thread that has run a parallel region. The engine computes on its own thread, but the
process loaded the model (and maybe ran other torch work) on another thread first, so two pools
exist. Once libgomp manages more threads than there are cores, it cuts the time its idle workers
spin before sleeping to almost nothing, and every parallel region pays a futex wake-up. On the
2-core development machine the same denoise call at batch 1 took 26.6 ms on the engine thread
against 14.5 ms on the main thread (a 256x128 @ 128x512 matmul: 0.35 vs 0.21 ms), and the
engine's measured batches ran 1.85x its calibration. Releasing the pool of the thread that hands
the work over (`omp_pause_resource_all`, OpenMP 5.0) brings the engine thread back to 0.21 ms.

Only the calling thread's pool is released; if that thread runs torch again later, libgomp
builds a new pool and the slowdown returns, so the engine's caller should leave torch to the
engine once it has started.
"""

from __future__ import annotations

import ctypes
import logging
import os

import torch

log = logging.getLogger(__name__)

OMP_PAUSE_HARD = 2  # omp_pause_resource_t: release the threads, not only idle them


def release_caller_pool() -> bool:
    """Release the calling thread's OpenMP worker threads. False where the runtime cannot.

    Must not be called inside a parallel region (a torch op on this thread): callers are plain
    Python code between torch calls.
    """
    if not torch.backends.openmp.is_available():
        return False
    try:
        # RTLD_NOLOAD: the runtime torch already loaded, or nothing (macOS and Windows builds
        # link other OpenMP runtimes); never load a second one.
        gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    except (OSError, AttributeError):
        log.debug("libgomp is not loaded: no OpenMP pool to release")
        return False
    pause = getattr(gomp, "omp_pause_resource_all", None)
    if pause is None:  # libgomp before GCC 9
        log.info("this libgomp has no omp_pause_resource_all: the engine thread may run slower")
        return False
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause(OMP_PAUSE_HARD) == 0
