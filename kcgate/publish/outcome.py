"""What publishing did, as a record: importable without PyGithub (the `github` extra)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """What publishing did: created, updated, skipped (by design) or fallback (it failed)."""

    action: str
    detail: str
    url: str = ""
    kind: str = "comment"  # comment or check-run: which step output the url goes to

    @property
    def failed(self) -> bool:
        return self.action == "fallback"


def missing_outcome(exc: ImportError) -> Outcome:
    """--publish without PyGithub: a fallback that names the fix (report mode of the action installs it)."""
    return Outcome(
        "fallback",
        f"publishing needs PyGithub, which is not installed ({exc}); fix: pip install 'kcgate[github]'",
    )
