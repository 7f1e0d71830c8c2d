"""Oracles: what a kernel's output is compared against.

``kcgate.numerics.oracles.freivalds`` holds Freivalds' randomized check for matrix products (O(n^2) instead of the
O(n^3) fp64 recomputation), with a per-row threshold derived from error analysis. It imports torch; this
package's ``__init__`` does not, so reporting commands that only touch names here stay torch-free.
"""
