"""A correct matmul that appends its process id to ``$KCGATE_TEST_PID_FILE``: which worker ran each call."""

from __future__ import annotations

import os

import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with open(os.environ["KCGATE_TEST_PID_FILE"], "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")
    return a @ b
