"""Reads the environment at import, as Triton reads TRITON_INTERPRET: right only when imported under
``KCGATE_TEST_ENV_PROBE=on`` (zeros otherwise), so a contract's ``env`` must reach the worker first."""

from __future__ import annotations

import os

import torch

MODE = os.environ.get("KCGATE_TEST_ENV_PROBE", "")


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b if MODE == "on" else torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
