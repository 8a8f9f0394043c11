"""Shared test setup: one torch thread per test process (the machines have 2 cores and
oversubscribing them makes timing-driven code, such as admission, erratic)."""

import torch

torch.set_num_threads(1)
