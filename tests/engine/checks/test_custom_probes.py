"""Stability probes on custom ops and the quantised families' static-scale probe, end to end (kcgate run,
kernels in a worker process): the probe kcgate infers from the fp64 reference's invariance, a declared one,
and a missing clamp before an fp8 cast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import kcgate

# The kernels under their own import string: a reference is never the kernel's own (#54).
KK_KERNELS = "from kk import *  # noqa: F403\n"
KERNELS = """
import torch

def gen(shape, dtype, g):
    return (torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype),

def bn_ref(x):  # batch norm over the batch dim, two passes in fp32
    h = x.float()
    mean = h.mean(0, keepdim=True)
    var = (h - mean).pow(2).mean(0, keepdim=True)
    return ((h - mean) * torch.rsqrt(var + 1e-5)).to(x.dtype)

def bn_two_pass(x):
    return bn_ref(x)

def bn_one_pass(x):  # the shipped bug: var = E[x^2] - E[x]^2
    mean = x.mean(0, keepdim=True)
    var = (x * x).mean(0, keepdim=True) - mean * mean
    return ((x - mean) * torch.rsqrt(var + 1e-5)).to(x.dtype)

def router_ref(logits):
    return torch.softmax(logits.float(), -1)

def router(logits):
    return torch.softmax(logits.float(), -1)

def router_no_max(logits):  # exp without subtracting the row max: overflows past logits of 88
    e = logits.float().exp()
    return e / e.sum(-1, keepdim=True)

def pair_ref(x, w):  # not shift-invariant in x or w: nothing inferred
    return (x.float() * w.float()).to(x.dtype)

def pair_gen(shape, dtype, g):
    return gen(shape, dtype, g)[0], gen(shape, dtype, g)[0]

E4 = torch.float8_e4m3fn

def _mm(qa, qb, sa, sb, dtype):
    return torch._scaled_mm(qa, qb.mT.contiguous().mT, scale_a=sa, scale_b=sb, out_dtype=dtype)

def fp8_clamped(a, b, sa, sb):
    return _mm((a.float() / sa).clamp(-448, 448).to(E4), (b.float() / sb).clamp(-448, 448).to(E4), sa, sb, a.dtype)

def _nosat(t):  # a cast without satfinite: NaN where round-to-nearest passes 448 (|t| >= 464)
    return torch.where(t.abs() >= 464, torch.full_like(t, float("nan")), t).to(E4)

def fp8_no_clamp(a, b, sa, sb):
    return _mm(_nosat(a.float() / sa), _nosat(b.float() / sb), sa, sb, a.dtype)
"""

CUSTOM = (
    '[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "custom"\nkernel = "kk_kernels:{kernel}"\n'
    'reference = "kk:{ref}"\ninputs = "kk:{gen}"\ndtypes = ["float32"]\nshapes = [[64, 32]]\n'
    "protocol = {{ seeds = 1, boundary = false }}\n{extra}\n"
)
FP8 = (
    '[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "scaled_mm"\nkernel = "kk:{kernel}"\n'
    'dtypes = ["bfloat16"]\nshapes = [[32, 256, 32]]\nprotocol = {{ seeds = 1, boundary = false{extra} }}\n'
)


def _run(tmp: Path, contract: str) -> list[dict]:  # type: ignore[type-arg]
    (tmp / "kk.py").write_text(KERNELS)
    (tmp / "kk_kernels.py").write_text(KK_KERNELS)
    (tmp / "contracts.toml").write_text(f'[project]\npaths = ["."]\n\n{contract}')
    proc = kcgate("run", "-c", "contracts.toml", "--results", "out.json", cwd=tmp, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((tmp / "out.json").read_text())
    cases = [dict(zip(data["case_fields"], row)) for row in data["cases"]]
    return [{**c, "metrics": dict(zip(data["metric_fields"], c["metrics"]))} for c in cases]


def _custom(tmp: Path, kernel: str, ref: str, gen: str = "gen", extra: str = "") -> list[dict]:  # type: ignore[type-arg]
    return _run(tmp, CUSTOM.format(kernel=kernel, ref=ref, gen=gen, extra=extra))


def _extra(case: dict) -> dict:  # type: ignore[type-arg]
    return case["metrics"]["extra"] or {}


@pytest.mark.slow
def test_a_one_pass_batch_norm_fails_the_inferred_offset_probe_and_a_two_pass_one_passes(
    tmp_path: Path,
) -> None:
    (good_dir := tmp_path / "two").mkdir()
    (bad_dir := tmp_path / "one").mkdir()
    good = _custom(good_dir, "bn_two_pass", "bn_ref")
    bad = _custom(bad_dir, "bn_one_pass", "bn_ref")
    assert [c["status"] for c in good] == ["pass"]
    assert _extra(good[0])["inferred_offset_probe_x"] == 1.0  # recorded as inferred
    assert _extra(good[0])["cancellation_x_probe_budget"] < 1
    assert [c["status"] for c in bad] == ["fail"]
    sig = bad[0]["signature"]
    assert sig["cause"] == "cancellation"
    assert "input 'x' offset by 100" in sig["summary"] and "inferred" in sig["summary"]


@pytest.mark.slow
def test_an_empty_stability_table_turns_the_inferred_probe_off(tmp_path: Path) -> None:
    """The one-pass batch norm passes its fp32 contract on centred inputs: only the probe catches it."""
    cases = _custom(tmp_path, "bn_one_pass", "bn_ref", extra="stability = { x = {} }")
    assert [c["status"] for c in cases] == ["pass"]
    assert "inferred_offset_probe_x" not in _extra(cases[0])


@pytest.mark.slow
def test_a_router_softmax_without_max_subtraction_fails_and_a_correct_one_passes(tmp_path: Path) -> None:
    (good_dir := tmp_path / "good").mkdir()
    (bad_dir := tmp_path / "bad").mkdir()
    assert [c["status"] for c in _custom(good_dir, "router", "router_ref")] == ["pass"]
    bad = _custom(bad_dir, "router_no_max", "router_ref")
    assert [c["status"] for c in bad] == ["fail"]
    summary = bad[0]["signature"]["summary"]  # the offset probe, or the exp-range probe, whichever runs first
    assert "input 'logits' offset by 100" in summary or "exp's range" in summary, summary


@pytest.mark.slow
def test_a_declared_probe_runs_where_nothing_is_inferred_and_an_unknown_input_is_named(
    tmp_path: Path,
) -> None:
    (a := tmp_path / "a").mkdir()
    (b := tmp_path / "b").mkdir()
    plain = _custom(a, "pair_ref", "pair_ref", gen="pair_gen", extra="stability = { w = { scale = 64 } }")
    assert [c["status"] for c in plain] == ["pass"]
    extra = _extra(plain[0])
    inferred = [k for k in extra if k.startswith("inferred_")]
    # the declared probe replaces the inferred stability probes; the drawn ones (ties, peaked) and the range
    # probes (kcgate.numerics.domains.RANGE_PROBES) still apply
    drawn = ("inferred_ties", "inferred_peaked", "inferred_subnormal", "inferred_exp", "inferred_log",
             "inferred_dynamic")  # fmt: skip
    assert "overflow_w_probe_budget" in extra and all(k.startswith(drawn) for k in inferred), inferred
    wrong = _custom(b, "pair_ref", "pair_ref", gen="pair_gen", extra="stability = { y = { offset = 10.0 } }")
    assert [c["status"] for c in wrong] == ["error"]
    assert "stability.y" in wrong[0]["message"] and "x, w" in wrong[0]["message"]


@pytest.mark.slow
def test_a_missing_clamp_before_the_fp8_cast_fails_the_static_scale_probe(tmp_path: Path) -> None:
    for kernel, extra, want in (
        ("fp8_clamped", "", "pass"),
        ("fp8_no_clamp", "", "fail"),
        ("fp8_no_clamp", ", probes = false", "pass"),  # kcgate's own scales (amax / 448) never reach it
    ):
        (d := tmp_path / f"{kernel}{bool(extra)}").mkdir()
        cases = _run(d, FP8.format(kernel=kernel, extra=extra))
        assert [c["status"] for c in cases] == [want], (kernel, extra, cases)
        if want == "fail":
            assert "static scales 4x" in cases[0]["signature"]["summary"]
