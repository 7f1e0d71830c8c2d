"""Floating-point numerics: the comparison metrics, the op families with their error bounds, the oracles
(fp64, native, Freivalds) and low-precision emulation."""
