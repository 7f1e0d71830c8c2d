"""Tiny kernels used by the tests: correct ones, lying ones and crashing ones."""
