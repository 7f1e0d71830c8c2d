"""Three-state calibration kernels, one module per contract class (``c_prc_01`` for C-PRC-01).

Each module exposes ``good``, ``bad`` and ``baseline`` kernels, ``BASIC_TEST`` (the name of the
functional test the bad kernel passes) and ``basic_test(kernel) -> bool`` (that test, runnable).
The class's built-in contract is in ``contracts.toml`` next to this file. A class with a second built-in
contract keeps its kernels in a sibling module (``c_prc_04_fp8`` for C-PRC-04's fp8 overflow contract).
"""

from __future__ import annotations


def module_name(class_id: str) -> str:
    """'C-PRC-01' → 'kcgate.kernels.calibration.c_prc_01'."""
    return f"kcgate.kernels.calibration.{class_id.lower().replace('-', '_')}"
