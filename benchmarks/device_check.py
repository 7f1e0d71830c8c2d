"""The prepared device check: one command that records what kcgate does on this machine's accelerator.

Usage: ``python benchmarks/device_check.py [--out DIR] [--device auto|cuda|rocm|cpu] [--smoke]``, or
``benchmarks/device_check.sh`` (``$OUT`` names the directory). Everything goes under the output directory:

- ``environment.json``: torch, the device, ``nvidia-smi`` / ``rocm-smi`` where present;
- ``runners.json``: ``kcgate runners --json``;
- ``contracts.json`` and ``contracts.md``: the repository's contracts.toml run on the device (verdicts,
  budgets, and each case's duration / kernel / oracle / harness seconds);
- ``families.toml``, ``families.json`` and ``families.md``: GEMM 8192³, causal attention 4×32×4096×128
  forward and backward, rmsnorm 16384×8192 (bf16 and fp16) and cross-entropy 8192×128256 (bf16), each one
  case of ``kcgate run`` beside the kernel's own time (warmed up, device-timed: CUDA/HIP events), with
  kcgate's overhead as a multiple of that time;
- ``freivalds.json``: Freivalds' check on the device at n = 4096, 8192 and 16384 against the GEMM's time;
- ``tracebacks/<section>.txt`` for any section that crashed (the others still run), and ``summary.json`` /
  ``summary.md`` with every section's status and seconds.

``--smoke`` runs the same code at tiny shapes (the CPU test, tests/test_device_check_smoke.py, runs it end to
end). On one H100 the full check is planned to finish within ``--budget-s`` (default 450 s): each family case
runs under ``kcgate run --timeout``, and a section that would start past the budget is recorded as skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECTIONS = (
    "environment",
    "runners",
    "contracts",
    "freivalds",
    "families",
    "verify-paths",
)  # cheap ones first
FREIVALDS_N = (4096, 8192, 16384)
FREIVALDS_N_SMOKE = (64, 128, 256)


@dataclass(frozen=True)
class Family:
    """One production-shape case: a builtin kernel under one op family, with its tiny smoke shape."""

    name: str
    op: str
    kernel: str
    shape: tuple[int, ...]
    smoke: tuple[int, ...]
    dtypes: tuple[str, ...] = ("bfloat16", "float16")
    extra: str = ""  # more TOML lines for the contract


FAMILIES = (
    Family("gemm", "matmul", "kcgate.kernels.builtin:matmul", (8192, 8192, 8192), (64, 96, 48)),
    Family(
        "attention-causal-fwd-bwd",
        "attention",
        "kcgate.kernels.builtin:attention",
        (4, 32, 32, 4096, 128),
        (1, 2, 2, 64, 32),
        extra='params = { causal = true }\ndirection = "both"',
    ),
    Family("rmsnorm", "rmsnorm", "kcgate.kernels.builtin:rmsnorm", (16384, 8192), (64, 256)),
    Family(
        "cross-entropy",
        "cross_entropy",
        "kcgate.kernels.builtin:cross_entropy",
        (8192, 128256),
        (64, 1000),
        dtypes=("bfloat16",),
    ),
)


@dataclass
class Check:
    """The run's settings and its record: each section's status and seconds."""

    out: Path
    device: str
    smoke: bool
    budget_s: float
    case_timeout_s: float
    fail: frozenset[str] = frozenset()  # sections made to crash, to test the traceback path
    verify: str = "host"  # KCGATE_VERIFY for the families: host, or device (the oracle where the kernel ran)
    t0: float = field(default_factory=time.perf_counter)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)


# ---- running kcgate -------------------------------------------------------------------------------


def kcgate(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m kcgate ARGS`` from the repository root (its exit code is the caller's to read). Past
    ``timeout`` it gets SIGTERM, on which ``kcgate run`` saves the finished cases and kills its workers (their
    own process groups, which a kill of this child alone would leave holding the GPU); SIGKILL 30 s later."""
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    cmd = [sys.executable, "-m", "kcgate", *args]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": path, **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        err += f"\n[device_check: stopped after {timeout:.0f} s, the budget left]"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def rows(results: Path) -> list[dict[str, Any]]:
    """A results file's cases as objects (its ``case_fields`` name the row's columns)."""
    doc = json.loads(results.read_text(encoding="utf-8"))
    metrics = doc["metric_fields"]
    out = []
    for row in doc["cases"]:
        case = dict(zip(doc["case_fields"], row))
        case["metrics"] = dict(zip(metrics, case["metrics"] or [None] * len(metrics)))
        out.append(case)
    return out


def _saved(check: Check, name: str, proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    (check.out / f"{name}.log").write_text(f"$ exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}", "utf-8")
    return {"exit_code": proc.returncode}


# ---- sections ---------------------------------------------------------------------------------------


def environment(check: Check) -> dict[str, Any]:
    import torch

    from kcgate.devices import get_backend

    name = check.device
    backend = get_backend(name)
    backend.configure()  # as a worker does
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "device": name,
        "fingerprint": backend.fingerprint().to_json(),
        "fast_fp64": backend.fast_fp64(),
        "argv": sys.argv[1:],
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for tool in ("nvidia-smi", "rocm-smi"):
        if shutil.which(tool):
            proc = subprocess.run([tool], capture_output=True, text=True, timeout=60)
            info[tool] = proc.stdout[-4000:]
    (check.out / "environment.json").write_text(json.dumps(info, indent=1), "utf-8")
    return {"device": name, "card": info["fingerprint"].get("device", "")}


def runners(check: Check) -> dict[str, Any]:
    proc = kcgate("runners", "--json", timeout=min(120.0, check.left()))
    (check.out / "runners.json").write_text(proc.stdout, "utf-8")
    if proc.returncode != 0:
        raise RuntimeError(f"kcgate runners --json exited {proc.returncode}: {proc.stderr[-2000:]}")
    found = json.loads(proc.stdout).get("backends", [])
    return {"detected": [b["backend"] for b in found if b.get("detected")]}


def _run_args(check: Check, out: Path) -> tuple[str, ...]:
    """``kcgate run`` of contracts.toml on the check's device at seed 1, its results written to ``out``."""
    return ("run", "-c", "contracts.toml", "--device", check.device, "--results", str(out), "--seed", "1",
            "-q", "--timeout", str(check.case_timeout_s))  # fmt: skip


def contracts(check: Check) -> dict[str, Any]:
    out = check.out / "contracts.json"
    proc = kcgate(*_run_args(check, out), timeout=check.left())
    found = _saved(check, "contracts", proc)
    cases = rows(out)
    (check.out / "contracts.md").write_text(_table(cases), "utf-8")
    statuses = [c["status"] for c in cases]
    spent = {k: round(sum(c.get(k) or 0.0 for c in cases), 3) for k in TIMES}
    return {**found, "cases": len(cases), **{s: statuses.count(s) for s in sorted(set(statuses))}, **spent}


TIMES = ("duration_s", "kernel_s", "oracle_s", "harness_s")
OVERHEAD_TARGET = 3.0
"""kcgate's time in a case beyond the kernel's calls, at most this multiple of one warm call of the kernel, at
production shapes: issue 34 for GEMM and attention, issue 58 for every family (rmsnorm, cross-entropy too)."""


def verify_paths(check: Check) -> dict[str, Any]:
    """contracts.toml again under KCGATE_VERIFY=device, where what is compared on the CPU (everything on the
    CPU smoke; on a GPU without fast fp64, the outputs copied back) also runs as torch ops: every case the same
    as the first run's (timings aside; the sensitivity gate's sums of squares to 1e-12, torch and numpy add in
    other orders; the Freivalds case draws its vectors from os.urandom, so its budget differs from run to run
    on either path)."""
    host = check.out / "contracts.json"
    out = check.out / "contracts-device-verify.json"
    verify = {"KCGATE_VERIFY": "device"}
    proc = kcgate(*_run_args(check, out), timeout=check.left(), env=verify)
    found = _saved(check, "contracts-device-verify", proc)
    a, b = (_comparable(rows(p)) for p in (host, out))
    differ = sorted(k for k in a.keys() | b.keys() if not _same_case(a.get(k), b.get(k)))
    (check.out / "verify-paths.json").write_text(json.dumps({"compared": len(a), "differ": differ}, indent=1))
    if differ:
        raise AssertionError(f"{len(differ)} case(s) differ between the host and device paths: {differ[:5]}")
    return {**found, "compared": len(a), "differ": 0}


SUMS = ("excess_rms_ratio", "excess_max_ratio", "excess_ratio", "kernel_rms_err", "reference_rms_err")


def _same_case(a: Any, b: Any, key: str = "") -> bool:
    """Equal, the sensitivity gate's sums of squares (``SUMS``) to 1e-12 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_case(a[k], b[k], k) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_case(x, y, key) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and key in SUMS:
        return math.isclose(a, b, rel_tol=1e-12)
    return bool(a == b)


def _comparable(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        c["case_id"]: {k: v for k, v in c.items() if not k.endswith("_s")}
        for c in cases
        if not c["case_id"].startswith("matmul-large-freivalds/")
    }


def families(check: Check) -> dict[str, Any]:
    toml = check.out / "families.toml"
    toml.write_text(families_toml(check.smoke), "utf-8")
    out = check.out / "families.json"
    proc = kcgate(
        "run", "-c", str(toml), "--device", check.device, "--results", str(out), "--seed", "1", "-q",
        "--timeout", str(check.case_timeout_s), timeout=check.left(), env={"KCGATE_VERIFY": check.verify},
    )  # fmt: skip
    found = _saved(check, "families", proc)
    cases = rows(out) if out.exists() else []
    own = own_times(check, toml)
    for c in cases:
        c["own_s"] = own.get(c["contract_id"], {}).get(c["dtype"])
        c["overhead_x"] = overhead(c)
    (check.out / "families-cases.json").write_text(json.dumps(cases, indent=1), "utf-8")
    (check.out / "families.md").write_text(_table(cases, own=True), "utf-8")
    worst = max((c["overhead_x"] for c in cases if c["overhead_x"] is not None), default=None)
    target = {c["case_id"]: c["overhead_x"] is not None and c["overhead_x"] <= OVERHEAD_TARGET for c in cases}
    return {**found, "cases": len(cases), "worst_overhead_x": worst, f"within_{OVERHEAD_TARGET:g}x": target}


def families_toml(smoke: bool) -> str:
    """One contract per family: one seed, one trial, at the production (or smoke) shape."""
    parts = ['[project]\nname = "device-check"\npaths = ["."]\n']
    for f in FAMILIES:
        shape = list(f.smoke if smoke else f.shape)
        parts.append(
            f'[[contract]]\nid = "{f.name}"\nclass = "C-PRC-01"\nkernel = "{f.kernel}"\nop = "{f.op}"\n'
            f'dtypes = {json.dumps(list(f.dtypes))}\naccumulate = "float32"\nshapes = [{shape}]\n'
            f"protocol = {{ seeds = 1, trials = 1, boundary = false }}\n{f.extra}\n"
        )
    return "\n".join(parts)


def overhead(case: dict[str, Any]) -> float | None:
    """kcgate's time in the case beyond the kernel's own calls, as a multiple of one warm call's time."""
    own = case.get("own_s")
    if not own or case.get("duration_s") is None:
        return None
    return max(0.0, float(case["duration_s"]) - float(case["kernel_s"] or 0.0)) / own


def own_times(check: Check, toml: Path, warmup: int = 3, repeats: int = 10) -> dict[str, dict[str, float]]:
    """Each family's warm kernel time on the device (forward and backward for a backward contract): the
    median of ``repeats`` device-timed calls after ``warmup``, on inputs drawn on the host and moved once."""
    import torch

    from kcgate.contracts.load import load_project
    from kcgate.devices import get_backend
    from kcgate.engine.case import op_for
    from kcgate.engine.invoke import adapt
    from kcgate.util.resolve import resolve

    backend = get_backend(check.device)
    project = load_project(toml)
    found: dict[str, dict[str, float]] = {}
    for f in FAMILIES:
        contract = project.contract(f.name)
        op = op_for(contract, project.paths)
        for name in f.dtypes:
            dtype = getattr(torch, name)
            shape = f.smoke if check.smoke else f.shape
            call = _one_call(
                contract, op, adapt(resolve(f.kernel, project.paths), contract, backend.device(), dtype, op)
            )
            xs = tuple(
                t.to(backend.device())
                for t in op.make_inputs(shape, dtype, torch.Generator().manual_seed(0), "normal")
            )
            try:
                run = functools.partial(call, xs, shape)
                found.setdefault(f.name, {})[name] = timed(backend, run, warmup, repeats)
            except Exception:  # noqa: BLE001 — recorded, and the other families still run
                _traceback(check, f"own-time-{f.name}-{name}")
            finally:
                backend.empty_cache()
    return found


def _one_call(
    contract: Any, op: Any, kernel: Callable[..., Any]
) -> Callable[[Sequence[Any], tuple[int, ...]], Any]:
    """The harness's call of the kernel (its keyword arguments, its output), with the backward pass for a
    backward contract, without the harness's checks."""
    import torch

    def call(xs: Sequence[Any], shape: tuple[int, ...]) -> Any:
        leaves = [
            x.detach().requires_grad_() if contract.backward and x.is_floating_point() else x for x in xs
        ]
        with torch.set_grad_enabled(contract.backward):
            out = kernel(*leaves, **(op.kwargs(shape) if op.kwargs else {}))
            out = op.output(out) if op.output else out
            out = out[0] if isinstance(out, (tuple, list)) else out
        if contract.backward:
            wrt = [x for x in leaves if x.requires_grad]
            return torch.autograd.grad(out, wrt, torch.ones_like(out))
        return out

    return call


def timed(backend: Any, fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    """Median device seconds of ``fn`` after ``warmup`` calls (the backend's stopwatch: events on CUDA/ROCm)."""
    for _ in range(warmup):
        fn()
    backend.synchronize()
    took = []
    for _ in range(repeats):
        watch = backend.stopwatch()
        watch.start()
        fn()
        took.append(watch.stop())
    return statistics.median(took)


def freivalds(check: Check) -> dict[str, Any]:
    """Freivalds' check (kcgate's default k) on device tensors against the bf16 GEMM it verifies."""
    from kcgate.devices import get_backend

    backend = get_backend(check.device)
    found: list[dict[str, Any]] = []
    for n in FREIVALDS_N_SMOKE if check.smoke else FREIVALDS_N:
        if check.left() < 20:
            found.append({"n": n, "skipped": "budget"})
            continue
        try:
            found.append(freivalds_at(backend, n))
        except Exception as exc:  # noqa: BLE001 — one size's crash (out of memory, say) leaves the others
            _traceback(check, f"freivalds-n{n}")
            found.append({"n": n, "crashed": f"{type(exc).__name__}: {exc}"[:300]})
        finally:
            backend.empty_cache()
    (check.out / "freivalds.json").write_text(json.dumps(found, indent=1), "utf-8")
    return {"sizes": [r["n"] for r in found], "all_passed": all(r.get("passed") for r in found)}


def freivalds_at(backend: Any, n: int) -> dict[str, Any]:
    """One size: inputs drawn on the host (as kcgate draws them) and moved once; the check and the GEMM timed
    on the device."""
    import torch

    from kcgate.numerics.oracles.freivalds import freivalds_check

    gen = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=gen).to(device=backend.device(), dtype=torch.bfloat16)
    b = torch.randn(n, n, generator=gen).to(device=backend.device(), dtype=torch.bfloat16)
    c = a @ b
    res = freivalds_check(a, b, c)
    gemm = timed(backend, lambda: a @ b, 2, 5)
    check_s = timed(backend, lambda: freivalds_check(a, b, c), 1, 3)
    return {
        "n": n,
        "dtype": "bfloat16",
        "device": str(c.device),
        "passed": bool(res.passed),
        "budget_used": float(res.budget_used),
        "k": int(res.k),
        "gemm_s": gemm,
        "freivalds_s": check_s,
        "freivalds_over_gemm": check_s / gemm if gemm > 0 else None,
    }


RUNS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "environment": environment,
    "runners": runners,
    "contracts": contracts,
    "families": families,
    "freivalds": freivalds,
    "verify-paths": verify_paths,
}
NEEDS_S = {
    "environment": 0.0,
    "runners": 10.0,
    "contracts": 30.0,
    "families": 60.0,
    "freivalds": 20.0,
    "verify-paths": 30.0,
}


# ---- the record -------------------------------------------------------------------------------------


def _table(cases: list[dict[str, Any]], own: bool = False) -> str:
    head = "| case | status | budget_used | duration_s | kernel_s | oracle_s | harness_s |"
    head += " own_s | overhead_x |\n" if own else "\n"
    rule = "|---" * (9 if own else 7) + "|\n"
    lines = [head, rule]
    for c in cases:
        cells = [c["case_id"], c["status"], _num(c["metrics"].get("budget_used"))]
        cells += [_num(c.get(k)) for k in ("duration_s", "kernel_s", "oracle_s", "harness_s")]
        if own:
            cells += [_num(c.get("own_s")), _num(c.get("overhead_x"))]
        lines.append("| " + " | ".join(cells) + " |\n")
    return "".join(lines)


def _num(v: Any) -> str:
    return "" if v is None else f"{float(v):.4g}"


def _traceback(check: Check, name: str) -> None:
    tb = check.out / "tracebacks"
    tb.mkdir(exist_ok=True)
    (tb / f"{name}.txt").write_text(traceback.format_exc(), "utf-8")


def run_section(check: Check, name: str) -> None:
    """Run one section; a crash leaves its traceback and the others run on."""
    t0 = time.perf_counter()
    if check.left() < NEEDS_S[name]:
        check.sections[name] = {"status": "skipped", "why": f"under {NEEDS_S[name]:.0f} s of the budget left"}
        check.sections[name]["seconds"] = 0.0
        return
    try:
        if name in check.fail:
            raise RuntimeError(f"--fail {name}: a crash on purpose (tests the traceback path)")
        found = RUNS[name](check)
        check.sections[name] = {"status": "ok", **found}
    except BaseException as exc:  # noqa: BLE001 — one failure never stops the rest
        if isinstance(exc, KeyboardInterrupt):
            raise
        _traceback(check, name)
        check.sections[name] = {"status": "crashed", "error": f"{type(exc).__name__}: {exc}"[:500]}
    check.sections[name]["seconds"] = round(time.perf_counter() - t0, 3)


def summary(check: Check) -> dict[str, Any]:
    doc = {
        "device": check.device,
        "smoke": check.smoke,
        "verify": check.verify,
        "budget_s": check.budget_s,
        "seconds": round(time.perf_counter() - check.t0, 3),
        "sections": check.sections,
    }
    (check.out / "summary.json").write_text(json.dumps(doc, indent=1), "utf-8")
    lines = [f"# kcgate device check ({check.device}{', smoke' if check.smoke else ''})\n\n"]
    lines += [
        f"{doc['seconds']:.1f} s in all (budget {check.budget_s:.0f} s).\n\n| section | status | seconds |\n"
    ]
    lines += ["|---|---|---|\n"] + [
        f"| {k} | {v['status']} | {v['seconds']} |\n" for k, v in check.sections.items()
    ]
    (check.out / "summary.md").write_text("".join(lines), "utf-8")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "device-check-out")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (the CPU test)")
    ap.add_argument("--budget-s", type=float, default=450.0)
    ap.add_argument("--case-timeout-s", type=float, default=60.0, help="kcgate run --timeout for each case")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--fail", default="", help="sections to crash on purpose (a test of the traceback path)")
    ap.add_argument(
        "--verify", choices=("host", "device"), default="host", help="KCGATE_VERIFY for the families"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.device == "auto":  # resolved once, so every section and kcgate run use the same device
        from kcgate.devices import default_backend

        args.device = default_backend()
    check = Check(
        out,
        args.device,
        args.smoke,
        args.budget_s,
        args.case_timeout_s,
        frozenset(filter(None, args.fail.split(","))),
        args.verify,
    )
    for name in args.sections.split(","):
        run_section(check, name)
        print(
            f"{name}: {check.sections[name]['status']} ({check.sections[name].get('seconds', 0)} s)",
            flush=True,
        )
    doc = summary(check)
    print(f"wrote {out}/summary.md ({doc['seconds']:.1f} s)")
    return 0 if all(s["status"] == "ok" for s in check.sections.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
