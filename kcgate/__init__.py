"""kcgate: kernel contracts for ML kernels, run on every vendor's hardware and gated in CI."""

__version__ = "0.1.0"
