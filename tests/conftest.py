"""Shared test set-up: one intra-op thread, so float32 results are bitwise reproducible."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import torch

torch.set_num_threads(1)
