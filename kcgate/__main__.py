"""Entry point for ``python -m kcgate``."""

from kcgate.cli import main

main()
