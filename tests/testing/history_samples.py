"""Results files for several commits and runners with a planted drift, for the history tests."""

from __future__ import annotations

from pathlib import Path

from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult, Signature, write_run

RUNNERS = {
    "nvidia-h100": Fingerprint(backend="cuda", vendor="nvidia", device="H100", arch="sm_90", torch="2.5.1"),
    "amd-mi300x": Fingerprint(backend="rocm", vendor="amd", device="MI300X", arch="gfx942", torch="2.5.1"),
    "cpu-x86": Fingerprint(backend="cpu", vendor="intel", device="Xeon", torch="2.5.1"),
}
DRIFT_AT = 3  # the commit (0-based) where gemm-bf16 on amd-mi300x jumps from 0.05 to 0.6
FAIL_AT = 4  # ... and where it breaks (budget 3.5)
DRIFT_RUNNER = "amd-mi300x"
# rms-norm (not in the default contracts): within its bound (budget 0.5) at every commit, failing the
# sensitivity gate from EXCESS_AT on (excess ratio 7.0, from 0.8): only the severity shows it
EXCESS_AT = 2
EXCESS = "rms-norm"


def commit_sha(i: int) -> str:
    return f"{i + 1:x}" * 40 if i < 15 else f"{i:040x}"


def commit_time(i: int) -> str:
    return f"2026-11-{i + 1:02d}T12:00:00Z"


def case(
    contract: str,
    seed: int,
    status: str,
    budget: float,
    error: float,
    sig: Signature | None = None,
    extra: tuple[tuple[str, float], ...] = (),
) -> CaseResult:
    return CaseResult(
        case_id=f"{contract}/float32/64x64/s{seed}",
        contract_id=contract,
        klass="C-PRC-01",
        op="matmul",
        dtype="float32",
        shape=(64, 64),
        seed=seed,
        status=status,
        metrics=Metrics(budget_used=budget, max_abs_err=error, max_ulp=2.0, extra=extra),
        signature=sig,
    )


def run_at(i: int, runner: str, contracts: tuple[str, ...] = ("gemm-bf16", "softmax-fp32")) -> RunResult:
    cases = []
    for contract in contracts:
        if contract == EXCESS:
            cases += _excess_cases(i)
            continue
        budget, error, status, sig = 0.05, 1e-6, "pass", None
        if contract == "gemm-bf16" and runner == DRIFT_RUNNER and i >= DRIFT_AT:
            budget, error = (3.5, 1e-3) if i >= FAIL_AT else (0.6, 5e-6)
            if i >= FAIL_AT:
                status, sig = (
                    "fail",
                    Signature("low-precision-accumulator", "behaves like a bf16 accumulator"),
                )
        if contract == "softmax-fp32" and runner == DRIFT_RUNNER:
            error = 1e-4  # 100x the other runners: a consensus outlier at every commit
        cases += [case(contract, s, status, budget + 0.001 * s, error, sig) for s in range(2)]
    return RunResult(runner, RUNNERS[runner], tuple(cases))


def _excess_cases(i: int) -> list[CaseResult]:
    failing = i >= EXCESS_AT
    sig = (
        Signature("excess-error", "forward output: error 7x a correct implementation's") if failing else None
    )
    extra = (("excess_ratio", 7.0 if failing else 0.8),)
    status = "fail" if failing else "pass"
    return [case(EXCESS, s, status, 0.5, 1e-5, sig, extra) for s in range(2)]


def write_commits(
    root: Path,
    n: int = 6,
    runners: tuple[str, ...] = tuple(RUNNERS),
    contracts: tuple[str, ...] = ("gemm-bf16", "softmax-fp32"),
) -> list[Path]:
    """One directory of results files per commit (``root/<i>/<runner>.json``)."""
    dirs = []
    for i in range(n):
        d = root / f"c{i}"
        for runner in runners:
            write_run(d / f"{runner}.json", run_at(i, runner, contracts))
        dirs.append(d)
    return dirs
