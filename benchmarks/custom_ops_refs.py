"""The library formulations of benchmarks/custom_ops_kernels.py under a second import string: a benchmark's
contract names them as its reference, apart from the kernel's own import string (kcgate refuses a reference
that is the kernel itself, #54)."""

from benchmarks.custom_ops_kernels import *  # noqa: F403
