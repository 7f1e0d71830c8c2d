"""Tool failures (not findings) and the documented exit codes they map to."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ExitCode(enum.IntEnum):
    """Documented process exit codes (README, "Exit codes")."""

    OK = 0  # every contract holds / the gate is green
    VIOLATION = 1  # at least one contract is violated or a blocking change was found
    BAD_CONTRACTS = 2  # contracts.toml is malformed or invalid
    BAD_USAGE = 3  # bad flag, missing file, bad results file
    INTERNAL = 4  # a bug in kcgate itself
    NOTHING_SELECTED = 5  # filters selected no case
    UNDER_SPECIFIED = 6  # calibrate: a bad implementation was accepted


@dataclass(frozen=True)
class Problem:
    """One problem located in a file: what, where and how to fix it."""

    file: str
    line: int | None
    where: str  # contract id and key path, e.g. "contract 'gemm'.tolerance.lambda"
    message: str
    fix: str = ""

    def render(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{loc}: {self.where}: {self.message}" if self.where else f"{loc}: {self.message}"
        return f"{text}\n    fix: {self.fix}" if self.fix else text


class KcgateError(Exception):
    """A tool failure with a user-facing message and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems

    def render(self) -> str:
        lines = [f"error: {self.message}"]
        lines += [p.render() for p in self.problems]
        return "\n".join(lines)


class ContractsError(KcgateError):
    """contracts.toml could not be loaded; carries every problem found."""

    exit_code = ExitCode.BAD_CONTRACTS


class UsageError(KcgateError):
    """A bad flag, path or input file (results, baselines)."""

    exit_code = ExitCode.BAD_USAGE


class ResultsError(UsageError):
    """A results or baseline file is malformed, hostile or of the wrong schema."""
