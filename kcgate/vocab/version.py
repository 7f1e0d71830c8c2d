"""kcgate's version, the one source: the package's face, the CLI, the results files and the wheel read it here."""

from __future__ import annotations

__version__ = "0.1.0"
