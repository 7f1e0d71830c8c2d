"""Golden-file comparison: KCGATE_REGEN_GOLDEN=1 rewrites the files so reviewers see format changes."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def check_golden(name: str, actual: str) -> None:
    """Compare with tests/golden/<name>, or rewrite it when KCGATE_REGEN_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("KCGATE_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), (
        f"{path} is missing; run the tests with KCGATE_REGEN_GOLDEN=1 and review the new file"
    )
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, (
        f"{path.name} changed; if intended, regenerate with KCGATE_REGEN_GOLDEN=1 and review the diff"
    )
