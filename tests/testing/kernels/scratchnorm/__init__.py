"""A kernel package for `kcgate init`: Llama-style RMSNorms that ship eps = 1e-6 (tests/adopt/test_init.py)."""
