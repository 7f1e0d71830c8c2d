"""Utilities with no kcgate knowledge: bounded reads of untrusted files, the frozen JSON codec, TOML line lookup."""
