"""Hand-built Verdicts and runs for the report renderers and publisher tests (no diff engine needed)."""

from __future__ import annotations

from pathlib import Path

from kcgate.gate.model import CaseChange, Diff, RunnerDiff
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult, Signature

SHA_OLD = "1" * 40
SHA_NEW = "2" * 40
SHA_NEWER = "3" * 40

HOSTILE = (
    "@octocat <img src=x onerror=alert(1)> | ] [click](https://evil.example) `x` ``` "
    "\n## heading\n<!-- kcgate:sticky --> ::error::spoof %0A \x1b[31m \u202e"
)


def change(
    category: str,
    runner: str = "nvidia-h100",
    contract: str = "gemm-bf16",
    case: str | None = None,
    **kw: object,
) -> CaseChange:
    blocking = bool(
        kw.pop(
            "blocking", category in ("new-violation", "error", "missing-runner", "expired-waiver", "removed")
        )
    )
    fields: dict[str, object] = {
        "category": category,
        "runner": runner,
        "case_id": f"{contract}/bfloat16/128x4096x128/s0" if case is None else case,
        "contract_id": contract,
        "klass": "C-PRC-01",
        "status": "fail"
        if category in ("new-violation", "still-failing", "waived", "expired-waiver")
        else "pass",
        "base_status": "pass",
        "budget_used": 0.4,
        "base_budget_used": 0.3,
        "line": 12,
        "blocking": blocking,
    }
    fields.update(kw)
    return CaseChange(**fields)  # type: ignore[arg-type]


def sample_verdict() -> Diff:
    """Two runners, one of each interesting category, and a missing leg."""
    nvidia = RunnerDiff(
        "nvidia-h100",
        "aaaaaaaaaaaa",
        "aaaaaaaaaaaa",
        (
            change(
                "new-violation",
                budget_used=1873.2,
                base_budget_used=0.21,
                signature="behaves like a bf16 accumulator (8 effective bits)",
            ),
            change("unchanged", contract="softmax-fp32", case="softmax-fp32/float32/8x1024/s0", line=30),
            change(
                "budget-drift",
                contract="softmax-fp32",
                case="softmax-fp32/float32/1x65536/s0",
                budget_used=0.91,
                base_budget_used=0.2,
                budget_factor=4.55,
                line=30,
            ),
            change(
                "fixed",
                contract="layernorm-fp16",
                case="layernorm-fp16/float16/64x4096/s0",
                base_status="fail",
                line=44,
            ),
        ),
    )
    amd = RunnerDiff(
        "amd-mi300x",
        "bbbbbbbbbbbb",
        "cccccccccccc",
        (
            change(
                "error",
                runner="amd-mi300x",
                contract="gather-oob",
                case="gather-oob/int64/1024/s1",
                status="error",
                message="worker crashed: SIGSEGV",
                budget_used=None,
                line=58,
            ),
            change(
                "waived",
                runner="amd-mi300x",
                contract="gemm-bf16",
                message="waived until 2027-03-01 (owner @alice): MPS bf16",
            ),
            change(
                "incomparable",
                runner="amd-mi300x",
                contract="softmax-fp32",
                case="softmax-fp32/float32/8x1024/s0",
                line=30,
            ),
        ),
    )
    missing = RunnerDiff(
        "intel-max",
        "",
        "",
        (
            change(
                "missing-runner",
                runner="intel-max",
                contract="",
                case="",
                budget_used=None,
                base_budget_used=None,
                line=None,
                status="",
                base_status="",
            ),
        ),
    )
    return Diff((nvidia, amd, missing))


def passing_verdict() -> Diff:
    return Diff(
        (
            RunnerDiff(
                "cpu-x86",
                "dddddddddddd",
                "dddddddddddd",
                (
                    change("unchanged", runner="cpu-x86"),
                    change("fixed", runner="cpu-x86", contract="softmax-fp32"),
                ),
            ),
        )
    )


def hostile_verdict() -> Diff:
    """Every untrusted field set to something that would ping, inject HTML or break a table if unescaped."""
    c = change(
        "new-violation",
        runner=HOSTILE[:50],
        contract=HOSTILE,
        case=HOSTILE,
        signature=HOSTILE,
        message=HOSTILE,
        klass=HOSTILE,
    )
    return Diff((RunnerDiff(HOSTILE[:50], "eeeeeeeeeeee", "eeeeeeeeeeee", (c,)),))


def big_verdict(n: int = 5000, contracts: int = 97) -> Diff:
    """``n`` failing cases of ``contracts`` contracts across four runners, with long messages (the comment
    has one row per contract: pass contracts=n for far more rows than fit)."""
    runners = ("nvidia-h100", "amd-mi300x", "intel-max", "apple-m3")
    diffs = []
    for r in runners:
        changes = tuple(
            change(
                "new-violation",
                runner=r,
                contract=f"contract-{i % contracts:05d}",
                case=f"contract-{i % contracts:05d}/float32/{i}x4096/s{i}",
                signature="behaves like an fp16 accumulator " + "x" * 60,
            )
            for i in range(n // len(runners))
        )
        diffs.append(RunnerDiff(r, "f" * 12, "f" * 12, changes))
    return Diff(tuple(diffs))


def sample_runs() -> dict[str, RunResult]:
    """Current runs matching sample_verdict's nvidia runner, for fingerprints and metrics in JUnit."""
    fp = Fingerprint(
        backend="cuda",
        vendor="nvidia",
        device="H100 80GB",
        arch="sm_90",
        driver="550.54",
        runtime="12.4",
        torch="2.5.1",
        flags=(("tf32", "off"),),
    )
    case = CaseResult(
        case_id="gemm-bf16/bfloat16/128x4096x128/s0",
        contract_id="gemm-bf16",
        klass="C-PRC-01",
        op="matmul",
        dtype="bfloat16",
        shape=(128, 4096, 128),
        seed=0,
        status="fail",
        metrics=Metrics(budget_used=1873.2, max_abs_err=0.5, max_rel_err=0.01, mismatches=17, elements=16384),
        duration_s=0.25,
        line=12,
    )
    return {"nvidia-h100": RunResult("nvidia-h100", fp, (case,))}


def results_case(
    case_id: str, status: str, budget: float, contract: str = "gemm-bf16", line: int = 12
) -> CaseResult:
    return CaseResult(
        case_id=case_id,
        contract_id=contract,
        klass="C-PRC-01",
        op="matmul",
        dtype="bfloat16",
        shape=(128, 4096, 128),
        seed=0,
        status=status,
        metrics=Metrics(budget_used=budget),
        line=line,
    )


def write_results_pair(root: Path, runner: str = "cpu-x86", regress: bool = True) -> tuple[Path, Path]:
    """A baseline and a current results file for one runner; the current one breaks a contract if ``regress``."""
    from kcgate.results.model import write_run

    fp = Fingerprint(backend="cpu", vendor="intel", device="Xeon", torch="2.5.1")
    base = RunResult(
        runner, fp, (results_case("gemm-bf16/a", "pass", 0.2), results_case("gemm-bf16/b", "pass", 0.3))
    )
    now = RunResult(
        runner,
        fp,
        (
            results_case("gemm-bf16/a", "fail" if regress else "pass", 3.5 if regress else 0.2),
            results_case("gemm-bf16/b", "pass", 0.3),
        ),
    )
    base_dir, cur_dir = root / "baselines", root / "artifacts" / f"kcgate-results-{runner}"
    write_run(base_dir / f"{runner}.json", base, stable=True)
    write_run(cur_dir / f"{runner}.json", now)
    return base_dir, root / "artifacts"


# ---- reviewer scenarios: real diffs of hand-built runs (tests/render/test_comment_goldens.py) ------------------

FP_NVIDIA = Fingerprint(backend="cuda", vendor="nvidia", device="H100 80GB", arch="sm_90", torch="2.5.1")
FP_AMD = Fingerprint(backend="rocm", vendor="amd", device="MI300X", arch="gfx942", torch="2.5.1")
FP_INTEL = Fingerprint(backend="xpu", vendor="intel", device="Max 1550", arch="pvc", torch="2.5.1")
LINES = {"gemm-bf16": 12, "softmax-fp32": 30, "layernorm-fp16": 44, "gelu-fp32": 58, "fused-moe": 71}
DTYPES = {
    "gemm-bf16": "bfloat16",
    "softmax-fp32": "float32",
    "layernorm-fp16": "float16",
    "gelu-fp32": "float32",
}
DESCRIPTIONS = {
    "gemm-bf16": "bf16 GEMM with fp32 accumulation",
    "softmax-fp32": "row softmax, max-subtracted",
    "layernorm-fp16": "fp16 LayerNorm, fp32 statistics",
    "gelu-fp32": "tanh-approximated GELU",
    "fused-moe": "fused MoE dispatch + GEMM",
}
SIGNATURES = {
    "gemm-bf16": Signature("low-precision-accumulator", "behaves like a bf16 accumulator (8 effective bits)"),
    "softmax-fp32": Signature("cancellation", "error scales with the rows' offset: max not subtracted"),
    "layernorm-fp16": Signature("tail-pattern", "errors in the last partial tile of 4096 (cols 4032-4095)"),
}


def scenario_case(
    contract: str,
    seed_index: int,
    status: str,
    budget: float | None,
    *,
    ulp: float | None = None,
    abs_err: float | None = None,
    signature: Signature | None = None,
    message: str = "",
) -> CaseResult:
    dtype = DTYPES.get(contract, "float32")
    cid = f"{contract}/{dtype}/128x4096/s{seed_index}"
    return CaseResult(
        case_id=cid,
        contract_id=contract,
        klass="C-PRC-01",
        op="matmul",
        dtype=dtype,
        shape=(128, 4096),
        seed=1_000_003 * (seed_index + 1) + len(contract),
        status=status,
        metrics=Metrics(budget_used=budget, max_ulp=ulp, max_abs_err=abs_err),
        signature=signature,
        message=message,
        line=LINES[contract],
    )


def passing(contract: str, seeds: int = 2, budget: float = 0.3) -> tuple[CaseResult, ...]:
    return tuple(
        scenario_case(contract, s, "pass", budget + 0.01 * s, ulp=2.0, abs_err=1e-3) for s in range(seeds)
    )


def regressed(contract: str, seeds: int = 2, scale: float = 1.0) -> tuple[CaseResult, ...]:
    sig = SIGNATURES[contract]
    return tuple(
        scenario_case(
            contract,
            s,
            "fail",
            scale * (40.0 + 7 * s),
            ulp=scale * (300.0 + s),
            abs_err=scale * 0.25 * (s + 1),
            signature=sig,
        )
        for s in range(seeds)
    )
