"""The reference's precision placement (kcgate.engine.placement): a kernel that reproduces a cast mutant of the
reference (here bit for bit; in another reduction order: test_placement_orders.py), in a 16-bit dtype, is named
by that change; a kernel that rounds elsewhere, or less, an fp32 case, a reference without casts and a rounding
that only feeds a matmul are left alone."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch

from kcgate.engine.placement import PLACEMENTS, Run, floats, misplaced, mutants
from kcgate.numerics.derived import in_fp64
from kcgate.numerics.ops.base import upcast
from tests.conftest import kcgate


def gemma_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # vLLM's GemmaRMSNorm: fp32, one cast
    orig = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    h = h * (1.0 + w.float())
    return h.to(orig)


def gemma_llama_cast(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # transformers#29402's cast order
    h = x.float()
    h = (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)
    return h * (1.0 + w)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # vLLM's RMSNorm: cast, then times w
    orig = x.dtype
    h = x.to(torch.float32)
    var = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(var + 1e-6)
    return h.to(orig) * w


def rms_norm_all_fp32(
    x: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:  # the reference says: fp32 to the end
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h * w.float()).to(x.dtype)


def rms_norm_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # fp32 throughout, one rounding
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def rms_norm_input_dtype_variance(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    var = x.pow(2).mean(dim=-1, keepdim=True)
    return (x * torch.rsqrt(var + 1e-6)) * w


def decay_scan(u: torch.Tensor, a: torch.Tensor) -> torch.Tensor:  # a recurrence with its state in fp32
    uf = u.float()
    s = torch.zeros_like(uf[:, 0])
    ys = []
    for i in range(uf.shape[1]):
        s = a * s + uf[:, i]
        ys.append(s * 0.5)
    return torch.stack(ys, 1).to(u.dtype)


def decay_scan_low_state(u: torch.Tensor, a: torch.Tensor) -> torch.Tensor:  # the state kept in u's dtype
    uf = u.float()
    s = torch.zeros_like(uf[:, 0]).to(u.dtype)
    ys = []
    for i in range(uf.shape[1]):
        s = (a * s + uf[:, i]).to(u.dtype)
        ys.append(s * 0.5)
    return torch.stack(ys, 1).to(u.dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # P kept in fp32
    s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    p = torch.softmax(s, dim=-1)
    o = p @ v.float()
    return o.to(q.dtype)


def attention_p_rounded(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:  # FlashAttention's
    s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    return torch.softmax(s, dim=-1).to(q.dtype) @ v


def no_casts(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _norm_inputs(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 256, generator=g).to(dtype), (torch.randn(256, generator=g) * 0.5 + 1).to(dtype)


def _runs(reference, kernel, make, dtype, seeds=(0, 1)):  # type: ignore[no-untyped-def]
    runs = []
    for seed in seeds:
        x = make(seed, dtype)
        refs = tuple(floats(in_fp64(reference, upcast(x))))
        runs.append(Run(x, tuple(floats(kernel(*x))), refs))
    return runs


def _scan_inputs(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(64, 24, generator=g).to(dtype), torch.rand(64, generator=g) * 0.5 + 0.45


def _attn_inputs(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(4, 64, 32, generator=g).to(dtype) for _ in range(3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gemmas_llama_cast_order_is_named_as_the_downcast_moved_up(dtype: torch.dtype) -> None:
    found = misplaced(gemma_norm, _runs(gemma_norm, gemma_llama_cast, _norm_inputs, dtype), dtype)
    assert found is not None and found.mutant.row == "downcast-moved-up"
    assert found.mutant.change.startswith("the downcast moved up to h")
    lines, first = inspect.getsourcelines(gemma_norm)
    at = first + next(i for i, t in enumerate(lines) if "h = h * torch.rsqrt" in t)
    assert found.where == f"line {at} of test_placement.py (in gemma_norm)"
    assert found.differ_mutant == 0 and found.differ_reference >= 0.05 * found.elements
    assert found.err_ratio > 1


def test_a_variance_in_the_input_dtype_is_named_as_the_upcast_dropped() -> None:
    runs = _runs(rms_norm, rms_norm_input_dtype_variance, _norm_inputs, torch.bfloat16)
    found = misplaced(rms_norm, runs, torch.bfloat16)
    assert found is not None and found.mutant.row == "upcast-dropped"
    assert found.mutant.change == ".to(torch.float32) dropped"


def test_a_recurrent_state_kept_in_the_input_dtype_is_named_as_a_downcast_inserted() -> None:
    runs = _runs(decay_scan, decay_scan_low_state, _scan_inputs, torch.bfloat16)
    found = misplaced(decay_scan, runs, torch.bfloat16)
    assert found is not None and found.mutant.row == "downcast-inserted"
    assert found.mutant.change == "s rounded to bfloat16"


def test_every_row_of_the_table_plants_a_mutant() -> None:
    rows = {m.row for ref in (gemma_norm, rms_norm, decay_scan) for m, _ in mutants(ref, torch.bfloat16)}
    assert rows == {p.name for p in PLACEMENTS}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_kernel_that_rounds_less_than_the_reference_is_not_named(dtype: torch.dtype) -> None:
    # the fused kernel differs from vLLM's reference in a fifth of the elements: mutants are tried, none is it
    runs = _runs(rms_norm, rms_norm_fused, _norm_inputs, dtype)
    assert misplaced(rms_norm, runs, dtype) is None


def test_the_references_casts_are_the_contract_another_librarys_order_included() -> None:
    # vLLM's RMSNorm (x̂ cast, then times the bf16 weight) against a reference written all in fp32: failed,
    # as the rmsnorm family fails it under casting_mode = "gemma"; against its own formulation it passes
    runs = _runs(rms_norm_all_fp32, rms_norm, _norm_inputs, torch.bfloat16)
    found = misplaced(rms_norm_all_fp32, runs, torch.bfloat16)
    assert (
        found is not None and found.mutant.change == "h rounded to bfloat16"
    )  # bf16 x̂ times bf16 w: exact in fp32
    assert (
        misplaced(rms_norm, _runs(rms_norm, rms_norm, _norm_inputs, torch.bfloat16), torch.bfloat16) is None
    )


def test_a_kernel_written_like_its_reference_costs_one_run_and_is_not_named() -> None:
    runs = _runs(gemma_norm, gemma_norm, _norm_inputs, torch.bfloat16)
    assert misplaced(gemma_norm, runs, torch.bfloat16) is None


def test_p_rounded_before_p_v_is_an_operand_rounding_the_bound_allows() -> None:
    # the mutant "p rounded, bf16 from there on" is FlashAttention's kernel bit for bit; p only feeds a matmul
    runs = _runs(attention, attention_p_rounded, _attn_inputs, torch.bfloat16)
    assert misplaced(attention, runs, torch.bfloat16) is None


def test_an_fp32_case_and_a_reference_without_casts_are_left_alone() -> None:
    runs = _runs(gemma_norm, gemma_llama_cast, _norm_inputs, torch.float32)
    assert misplaced(gemma_norm, runs, torch.float32) is None
    runs = _runs(no_casts, rms_norm_input_dtype_variance, _norm_inputs, torch.bfloat16)
    assert misplaced(no_casts, runs, torch.bfloat16) is None


# The kernels under their own import string: a reference is never the kernel's own (#54).
KK_KERNELS = "from kk import *  # noqa: F403\n"
KERNELS = """
import torch

def gen(shape, dtype, g):
    return torch.randn(shape, generator=g).to(dtype), (torch.randn(shape[-1:], generator=g) * 0.5).to(dtype)

def ref(x, w):  # vLLM's GemmaRMSNorm: x * (1 + w) in fp32, cast once at the end
    orig = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    h = h * (1.0 + w.float())
    return h.to(orig)

def llama_cast(x, w):  # transformers#29402: x̂ cast to the input dtype before the (1 + w) multiply
    h = x.float()
    h = (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)
    return h * (1.0 + w)

def add_ref(x, r, w):  # a fused add + Gemma RMSNorm: (normed, new residual)
    h = x.float() + r.float()
    res = h.to(x.dtype)
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    h = h * (1.0 + w.float())
    return h.to(x.dtype), res

def add_llama_cast(x, r, w):
    h = x.float() + r.float()
    n = (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)
    return n * (1.0 + w), h.to(x.dtype)

def add_gen(shape, dtype, g):
    x, w = gen(shape, dtype, g)
    return x, torch.randn(shape, generator=g).to(dtype), w

def fused(x, w):  # another correct order: (1 + w) first, one product, one rounding
    h = x.float()
    s = (1.0 + w.float()) * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    return (s * h).to(x.dtype)
"""


def _run(tmp: Path, kernel: str, ref: str = "ref", gen: str = "gen", extra: str = "") -> list[dict]:  # type: ignore[type-arg]
    (tmp / "kk.py").write_text(KERNELS)
    (tmp / "kk_kernels.py").write_text(KK_KERNELS)
    p = tmp / "contracts.toml"
    p.write_text(
        '[project]\npaths = ["."]\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "custom"\n'
        f'kernel = "kk_kernels:{kernel}"\nreference = "kk:{ref}"\ninputs = "kk:{gen}"\n'
        f'dtypes = ["bfloat16", "float32"]\nshapes = [[8, 512]]\n{extra}'
        "[contract.protocol]\nseeds = 1\nprobes = false\nboundary = false\n"
    )
    proc = kcgate("run", "-c", str(p), "--results", str(tmp / "out.json"), cwd=tmp, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((tmp / "out.json").read_text())
    return [dict(zip(data["case_fields"], row)) for row in data["cases"]]


@pytest.mark.slow
def test_kcgate_run_fails_the_llama_cast_in_bf16_only_and_passes_another_correct_order(
    tmp_path: Path,
) -> None:
    got = {}
    for kernel in ("llama_cast", "fused"):
        (tmp_path / kernel).mkdir()
        got[kernel] = {c["dtype"]: c for c in _run(tmp_path / kernel, kernel)}
    bad = got["llama_cast"]
    assert bad["bfloat16"]["status"] == "fail", bad
    assert "matches the reference with the downcast moved up to h" in json.dumps(bad["bfloat16"])
    assert bad["float32"]["status"] == "pass"  # fp32: no 16-bit rounding to place
    assert {c["status"] for c in got["fused"].values()} == {"pass"}


@pytest.mark.slow
def test_a_two_output_kernel_is_held_to_the_reference_output_by_output(tmp_path: Path) -> None:
    got = {
        c["dtype"]: c
        for c in _run(tmp_path, "add_llama_cast", "add_ref", "add_gen", 'outputs = ["out", "residual"]\n')
    }
    assert got["bfloat16"]["status"] == "fail", got
    assert "matches the reference with the downcast moved up to h" in json.dumps(got["bfloat16"])
    assert got["float32"]["status"] == "pass"
