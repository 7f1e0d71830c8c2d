"""Tool failures (not findings) and the documented exit codes they map to."""

from __future__ import annotations

import enum
import errno
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
    KERNEL_START = 7  # a worker could not start because of a contract's env or a kernel package's import
    INTERRUPTED = 130  # SIGINT: the finished cases are saved; --resume runs the rest
    TERMINATED = 143  # SIGTERM: likewise


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


class IOFault(UsageError):
    """A file kcgate must write or read could not be (full disk, permissions, a directory in the way)."""

    def __init__(self, path: object, exc: OSError, fix: str = "") -> None:
        fix = fix or "free space, fix the permissions or choose another path"
        super().__init__(f"{path}: {os_error(exc)}; {fix}")
        self.path, self.error = path, exc


class KernelStartError(KcgateError):
    """A worker (or init's probe) could not start because of what a contract or package brings: its ``env``
    (a PYTHONPATH shadowing torch), or an import that exits. Not a kcgate bug (exit 4 stays for those)."""

    exit_code = ExitCode.KERNEL_START


class RunInterrupted(KcgateError):
    """``kcgate run`` stopped by SIGINT or SIGTERM after saving its finished cases."""

    def __init__(self, message: str, exit_code: ExitCode) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def os_error(exc: OSError) -> str:
    """An OSError as one phrase: 'No space left on device (ENOSPC)'."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text
