"""A small kernel package for `kcgate init` tests: what a kernel repository ships, nothing kcgate-specific."""
