"""The comparison as torch ops where the tensors live (``compare_on_device``, ``metrics_on_device``): bitwise the
same Comparison and Metrics as the numpy host path, on random and special values, and on the repository's
contracts through ``kcgate run``; and no full tensor crosses to the host on the way (counted by a
TorchFunctionMode that sees every ``.cpu()``, ``.numpy()``, ``.tolist()``, ``.to("cpu")`` and ``__array__``).
"""

from __future__ import annotations

import json
import math
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

from kcgate.numerics.metrics import (
    VERIFY_ENV,
    compare,
    compare_on_device,
    metrics_on_device,
    to_metrics,
    ulp_distance,
    ulp_distance_on_device,
)
from tests.conftest import ROOT, kcgate

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64)
METHODS = ("error-bound", "abs-rel", "exact", "ulp")
SPECIALS = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, 7e4)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, NaN included (the same shape, dtype and bits)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _same_metrics(a: Any, b: Any) -> bool:
    def norm(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, tuple):
            return tuple(norm(x) for x in v)
        return v

    return norm(astuple(a)) == norm(astuple(b))


def _case(seed: int, dtype: torch.dtype, specials: bool, allowed_kind: str, shape: tuple[int, ...]) -> Any:
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(shape, generator=g, dtype=torch.float64) * 10 ** float(
        torch.randint(-6, 6, (1,), generator=g)
    )
    noise = torch.randn(shape, generator=g, dtype=torch.float64) * 1e-3 * ref.abs()
    out = (ref + noise).to(dtype) if dtype.is_floating_point else (ref * 100).round().to(dtype)
    if specials and out.numel():
        flat_o, flat_r = out.reshape(-1), ref.reshape(-1)
        for i, v in enumerate(SPECIALS[: out.numel()]):
            if dtype.is_floating_point:
                flat_o[(i * 7) % out.numel()] = v
            flat_r[(i * 5) % out.numel()] = v if i % 2 else flat_r[(i * 5) % out.numel()]
    if allowed_kind == "scalar":
        allowed = torch.tensor(2.0, dtype=torch.float64)
    elif allowed_kind == "zeros":
        allowed = torch.where(torch.rand(shape, generator=g) < 0.3, 0.0, 1e-3 * ref.abs().nan_to_num(1.0)).to(
            torch.float64
        )
    else:
        allowed = (1e-3 * ref.abs()).nan_to_num(1.0, posinf=1.0).to(torch.float64)
    return out, ref, allowed


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    dtype=st.sampled_from(DTYPES),
    method=st.sampled_from(METHODS),
    specials=st.booleans(),
    allowed_kind=st.sampled_from(["scalar", "zeros", "elementwise"]),
    shape=st.sampled_from([(0,), (1,), (7,), (5, 9), (2, 3, 17)]),
)
def test_the_device_path_equals_the_host_path_bit_for_bit(
    seed: int, dtype: torch.dtype, method: str, specials: bool, allowed_kind: str, shape: tuple[int, ...]
) -> None:
    out, ref, allowed = _case(seed, dtype, specials, allowed_kind, shape)
    if method in ("exact", "ulp"):
        allowed = torch.full((), 0.0 if method == "exact" else 2.0, dtype=torch.float64)
    host = compare(out, ref, allowed, method)
    dev = compare_on_device(out, ref, allowed, method)
    for name in ("err", "signed", "ratio", "ulp", "ref"):
        assert _same(getattr(host, name), getattr(dev, name)), name
    assert host.finite == dev.finite
    extra = {"reduction_len": 3.0}
    assert _same_metrics(to_metrics(host, extra), metrics_on_device(dev, extra))


def test_half_ulps_round_once_as_numpy_does() -> None:
    """torch casts float64 to float16 through float32 (two roundings); the device path rounds once."""
    x = torch.tensor([1 + 2**-11 + 2**-40], dtype=torch.float64)
    assert x.to(torch.float16).item() == 1.0  # torch's double rounding, which the device path must not copy
    one = torch.tensor([1.0], dtype=torch.float16)
    assert ulp_distance(one, x).item() == ulp_distance_on_device(one, x).item() == 1.0
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(100_000, generator=g, dtype=torch.float64)
    out = ref.to(torch.float16)
    assert torch.equal(ulp_distance(out, ref), ulp_distance_on_device(out, ref))


@pytest.fixture(autouse=True)
def _no_captured_torch_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests push their own TorchFunctionMode around harness code: a torch-state baseline another
    in-process test captured would take it for a kernel's and pop it (a worker captures its own)."""
    from kcgate.engine import torch_state

    monkeypatch.setattr(torch_state, "_active", None)


class Transfers(TorchFunctionMode):
    """Counts reads of a whole tensor onto the host: what a device would copy. A read of fewer than ``smallest``
    elements is a summary (``metrics_on_device``'s seven numbers in one transfer, Freivalds' up to 8 flagged
    rows), not a tensor."""

    READS = frozenset({"cpu", "numpy", "tolist", "__array__", "item", "__bool__", "__float__", "__int__"})

    def __init__(self, smallest: int = 16) -> None:
        super().__init__()
        self.smallest = smallest
        self.seen: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        # ``.to("cpu")`` as written; ``.to(other.device)`` follows a tensor where it lives (on a GPU a move
        # host to device, never back), which on the CPU the counter could not tell from a copy back
        to_cpu = name == "to" and any(
            isinstance(a, str) and a == "cpu" for a in (*args[1:], *kwargs.values())
        )
        if t is not None and t.numel() >= self.smallest and (name in self.READS or to_cpu):
            self.seen.append(f"{name}{tuple(t.shape)}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("specials", [False, True])
def test_no_full_tensor_crosses_to_the_host_on_the_device_path(specials: bool) -> None:
    out, ref, allowed = _case(1, torch.bfloat16, specials, "zeros", (64, 33))
    with Transfers() as device_path:
        metrics_on_device(compare_on_device(out, ref, allowed, "error-bound"))
    assert device_path.seen == []
    with Transfers() as host_path:  # the counter is not blind: the numpy path reads whole tensors
        to_metrics(compare(out, ref, allowed, "error-bound"))
    assert any(s.startswith("numpy") for s in host_path.seen)


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads(path.read_text())
    fields = doc["case_fields"]
    return {r[0]: {k: v for k, v in zip(fields, r) if not k.endswith("_s")} for r in doc["cases"]}


# The sensitivity gate's statistics are sums of squares (rms), which torch and numpy add in different orders:
# they may differ in the last bits between the two paths; every other number is bitwise the same
SUMS = ("excess_rms_ratio", "excess_max_ratio", "excess_ratio", "kernel_rms_err", "reference_rms_err")


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two results rows differ, the gate's sums (``SUMS``) allowed 1e-12 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and where.endswith(SUMS):
        return [] if math.isclose(a, b, rel_tol=1e-12) else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


@pytest.mark.slow
def test_the_repositorys_contracts_give_the_same_results_on_both_paths(tmp_path: Path) -> None:
    """``kcgate run`` on contracts.toml with the host path and with the device path: every case's verdict,
    metrics, signature and message are the same (timings aside). The Freivalds case is left out: its random
    vectors come from os.urandom, by design, so its budget differs from run to run on either path."""
    found = {}
    for mode in ("host", "device"):
        out = tmp_path / f"{mode}.json"
        proc = kcgate(
            "run", "-c", str(ROOT / "contracts.toml"), "--device", "cpu", "--seed", "7", "--results", str(out), "-q",
            env={VERIFY_ENV: mode},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found[mode] = {k: v for k, v in _rows(out).items() if not k.startswith("matmul-large-freivalds/")}
    assert len(found["host"]) >= 40 and not _differences(found["host"], found["device"])


def test_ulp_keys_agree_with_numpy_on_negative_zero_and_extremes() -> None:
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        fi = torch.finfo(dtype)
        a = torch.tensor([-0.0, 0.0, fi.max, -fi.max, fi.tiny, -fi.tiny, fi.eps], dtype=dtype)
        b = torch.tensor([0.0, -0.0, float("inf"), -fi.max, 0.0, fi.tiny, 1.0], dtype=torch.float64)
        np.testing.assert_array_equal(ulp_distance(a, b).numpy(), ulp_distance_on_device(a, b).numpy())


FREIVALDS = """
[project]
name = "fv"

[[contract]]
id = "mm"
class = "C-PRC-01"
kernel = "kcgate.kernels.builtin:matmul"
op = "matmul"
oracle = "freivalds"
shapes = [[96, 128, 80]]
protocol = { seeds = 1, trials = 1 }
"""


def test_a_freivalds_trial_checks_the_kernels_own_tensors_and_reads_back_no_full_tensor(
    tmp_path: Path,
) -> None:
    """The output stays where the kernel left it (no ``.cpu()``), and Freivalds' check reads the guarded inputs
    the kernel saw: on a device only its summary (and up to 8 flagged rows' indices) comes back. (The kernel
    call's own phase moves the inputs host to device and reads the guard bands, through numpy on the CPU
    only; the counter cannot tell those from reads here, so it checks the ``.cpu()`` copy there.)"""
    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import make_context
    from kcgate.engine.harness import _call, _freivalds_trial
    from kcgate.engine.trial import Trial
    from kcgate.plan import make_plan

    found = {}
    for oracle in ("freivalds", "fp64"):
        toml = tmp_path / f"{oracle}.toml"
        toml.write_text(FREIVALDS.replace('oracle = "freivalds"', f'oracle = "{oracle}"'))
        project = load_project(toml)
        (case,) = make_plan(project, 1, {})
        ctx = make_context(project, case, CpuBackend())
        ctx.fp64_on_device = oracle == "freivalds"  # fp64 as on an RTX or L40S: its output is copied back
        inputs = ctx.inputs(case.shape, 0)
        trial = Trial(shape=tuple(case.shape), inputs=inputs)
        with Transfers(smallest=16) as call_phase:
            trial.out = _call(ctx, trial, ctx.kernel, {})
        found[oracle] = [s for s in call_phase.seen if s.startswith("cpu")]
    assert found == {"freivalds": [], "fp64": ["cpu(96, 80)"]}  # the counter sees the copy it replaces
    with Transfers(smallest=16) as verify_phase:
        _freivalds_ctx = make_context(load_project(tmp_path / "freivalds.toml"), case, CpuBackend())
        trial = Trial(shape=tuple(case.shape), inputs=inputs)
        trial.out = _call(_freivalds_ctx, trial, _freivalds_ctx.kernel, {})
        verify_phase.seen.clear()  # from here: the check only
        _freivalds_trial(_freivalds_ctx, trial)
    assert trial.ok and trial.freivalds is not None and verify_phase.seen == []
    assert [torch.equal(a, b) for a, b in zip(trial.on_device, inputs)] == [True, True]
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(trial.on_device, inputs))  # the guarded copies


def test_a_fast_fp64_device_verifies_where_the_kernel_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_device``: on a device with fast fp64 (the CPU here) the oracle, bound and comparison run on the
    kernel's own (guarded) inputs where it ran, with the same metrics as with the drawn inputs on the host
    (a device without fast fp64) and on either comparison path; method relative keeps the host path."""
    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import make_context
    from kcgate.engine.harness import on_device, run_trial
    from kcgate.plan import make_plan

    toml = tmp_path / "c.toml"
    toml.write_text(FREIVALDS.replace('oracle = "freivalds"', 'oracle = "fp64"'))
    project = load_project(toml)
    (case,) = make_plan(project, 1, {})
    ctx = make_context(project, case, CpuBackend())
    inputs = ctx.inputs(case.shape, 0)
    assert on_device(ctx)
    dev = run_trial(ctx, inputs=inputs)
    slow = make_context(project, case, CpuBackend())
    slow.fp64_on_device = False  # an RTX or L40S: the oracle stays on the host
    assert not on_device(slow)
    host = run_trial(slow, inputs=inputs)
    monkeypatch.setenv(VERIFY_ENV, "device")
    torch_path = run_trial(make_context(project, case, CpuBackend()), inputs=inputs)
    assert host.ok and _same_metrics(host.metrics, dev.metrics) and _same(host.ref, dev.ref)
    assert _same_metrics(host.metrics, torch_path.metrics)
    rel = make_context(project, case, CpuBackend())
    rel.contract = replace(rel.contract, tolerance=replace(rel.contract.tolerance, method="relative"))
    assert not on_device(rel)


def _passing_case(contract_id: str) -> Any:
    """A context for the repository's contract ``contract_id``'s first case, on the CPU."""
    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import make_context
    from kcgate.numerics.ops import default_shapes
    from kcgate.plan import make_plan

    project = load_project(ROOT / "contracts.toml")
    case = next(c for c in make_plan(project, 0, default_shapes()) if c.contract_id == contract_id)
    return make_context(project, case, CpuBackend())


@pytest.mark.parametrize("contract_id", ["layer-norm-backward", "softmax-fp32"])
def test_a_passing_case_reads_back_no_full_tensor_outside_the_kernels_call(
    contract_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole case's check, forward and backward and the sensitivity gate, on the torch-op path: outside the
    kernel's own call (which moves the drawn inputs to the device and, on the CPU, reads the guard bands
    through numpy), no full tensor crosses to the host: the oracle, the bounds, the gradients' references, the
    comparisons, the signal ratio, the stale check and the gate's references and statistics stay where the
    kernel ran, and only summaries come back. The counter is not blind: the CPU's numpy path reads them."""
    from kcgate.engine import harness
    from kcgate.engine.checks import CHECKS

    call = harness._call
    seen: dict[str, list[str]] = {}
    for mode in ("device", "host"):
        monkeypatch.setenv(VERIFY_ENV, mode)
        ctx = _passing_case(contract_id)
        with Transfers() as counter:

            def paused(*args: Any, **kwargs: Any) -> Any:
                mark = len(counter.seen)
                out = call(*args, **kwargs)
                del counter.seen[mark:]  # the kernel's call phase: its copies are the kernel's inputs
                return out

            monkeypatch.setattr(harness, "_call", paused)
            finding = CHECKS[ctx.contract.klass](ctx)
        assert finding.status == "pass", finding.message
        extra = dict(finding.metrics.extra)
        assert "excess_ratio" in extra  # the sensitivity gate ran
        assert ctx.contract.backward == any(k.startswith("grad_budget") for k in extra)
        seen[mode] = counter.seen
    assert seen["device"] == []
    assert any(s.startswith("numpy") for s in seen["host"])
