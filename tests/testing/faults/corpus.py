"""A corpus of planted faults across families, dtypes and magnitudes, each with the cause it must be named by.

``corpus()`` generates the faults; ``diagnose(fault, seed)`` runs the fault's class check in process (isolation
is not what is measured) and returns the signature cause. ``python -m tests.testing.faults.report`` writes the
confusion matrix to docs/signature-accuracy.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kcgate.engine import diagnosis as D
from kcgate.kernels import builtin as bk
from kcgate.numerics.emulate import blocked_matmul, round_mantissa

F = torch.nn.functional
Kernel = Callable[..., Any]

SHAPES: dict[str, tuple[int, ...]] = {
    "matmul": (32, 64, 32),
    "bmm": (2, 16, 32, 16),
    "linear": (32, 64, 32),
    "sum": (32, 256),
    "softmax": (32, 256),
    "logsumexp": (32, 256),
    "layernorm": (32, 256),
    "rmsnorm": (32, 256),
    "gelu": (32, 256),
    "silu": (32, 256),
}
CORRECT: dict[str, Kernel] = {
    "matmul": bk.matmul,
    "bmm": bk.bmm,
    "linear": bk.linear,
    "sum": bk.row_sum,
    "softmax": bk.softmax,
    "logsumexp": bk.logsumexp,
    "layernorm": bk.layernorm,
    "rmsnorm": bk.rmsnorm,
    "gelu": bk.gelu,
    "silu": bk.silu,
}
# relative magnitudes that exceed each dtype's bound: (small, large)
MAGNITUDE = {"float32": (1e-3, 3e-2), "bfloat16": (5e-2, 0.3)}


@dataclass(frozen=True)
class Fault:
    """One planted fault: the kernel, the contract it runs under, and the cause it must be named by."""

    id: str
    family: str
    dtype: str
    klass: str
    expected: str
    kernel: Kernel
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def kind(self) -> str:
        return self.id.split("/")[0]


def _perturbed(
    family: str, change: Callable[[torch.Tensor, torch.Generator], torch.Tensor], salt: int
) -> Kernel:
    """The correct kernel with ``change`` applied to its output in fp64 (deterministic per call)."""
    good = CORRECT[family]

    def kernel(*xs: torch.Tensor) -> torch.Tensor:
        y = good(*xs)
        g = torch.Generator().manual_seed(salt)
        return change(y.to(torch.float64), g).to(y.dtype)

    return kernel


def _rms(y: torch.Tensor) -> float:
    return float((y**2).mean().sqrt()) + 1e-30


def garbage_huge(y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return torch.randn(y.shape, generator=g, dtype=torch.float64) * 1e4 * (_rms(y) + 1)


def garbage_shuffled(y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    flat = y.flatten()
    sign = torch.randint(0, 2, flat.shape, generator=g).to(flat.dtype) * 2 - 1
    return (flat[torch.randperm(flat.numel(), generator=g)] * sign * 1.7).reshape(y.shape)


def offset_const(mag: float) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    return lambda y, g: y + mag * (_rms(y) + 1e-3)


def offset_block(mag: float) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    def change(y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        n = y.shape[-1]
        block = 16 if n % 16 == 0 and n > 16 else n
        bias = (
            (torch.rand(*y.shape[:-1], n // block, 1, generator=g, dtype=torch.float64) + 0.5)
            * mag
            * (_rms(y) + 1e-3)
        )
        return (y.reshape(*y.shape[:-1], n // block, block) + bias).reshape(y.shape)

    return change


def sparse(k: int, mag: float) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    def change(y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        out = y.clone().flatten()
        idx = torch.randperm(out.numel(), generator=g)[:k]
        out[idx] += mag * (out.abs().max() + 1)
        return out.reshape(y.shape)

    return change


def noise(mag: float) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    def change(y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        # fresh noise on each call: the salt fixes the stream, the output's own bits vary it
        g.manual_seed(int(y.abs().sum().item() * 1e6) % (2**62))
        return y + mag * _rms(y) * torch.randn(y.shape, generator=g, dtype=torch.float64)

    return change


def tail_zeroed(y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    out = y.clone()
    out[..., -max(2, y.shape[-1] // 8) :] = 0.0
    return out


# ---- integrity faults -------------------------------------------------------------------------------


def mutating(family: str) -> Kernel:
    good = CORRECT[family]

    def kernel(*xs: torch.Tensor) -> torch.Tensor:
        y = good(*xs)
        with torch.no_grad():
            xs[0].view(-1)[:4] = 0.0  # writes into its input after computing
        return y

    return kernel


def wrong_dtype(family: str) -> Kernel:
    good = CORRECT[family]
    return lambda *xs: good(*xs).to(torch.float64)


def stale(family: str) -> Kernel:
    good = CORRECT[family]
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def kernel(*xs: torch.Tensor) -> torch.Tensor:
        key = tuple(xs[0].shape)
        if key not in cache:
            cache[key] = good(*xs)
        return cache[key].clone()

    return kernel


# ---- faults with a mechanism ------------------------------------------------------------------------


def naive_softmax(upcast: bool) -> Kernel:
    def kernel(x: torch.Tensor) -> torch.Tensor:
        e = (x.float() if upcast else x).exp()  # no max-subtraction
        return (e / e.sum(-1, keepdim=True)).to(x.dtype)

    return kernel


def naive_logsumexp(upcast: bool) -> Kernel:
    def kernel(x: torch.Tensor) -> torch.Tensor:
        return (x.float() if upcast else x).exp().sum(-1).log().to(x.dtype)

    return kernel


def acc_matmul(acc: torch.dtype) -> Kernel:
    return lambda a, b: blocked_matmul(a, b, 32, acc).to(a.dtype)


def _blocked_acc(block: int) -> Kernel:
    """A bf16 running sum rounded every ``block`` terms (128: tests/testing/kernels/accumulate.bf16_blocks; 1: after
    every add, torch's CPU bf16 layer_norm dβ)."""
    return lambda a, b: blocked_matmul(a, b, block, torch.bfloat16).to(a.dtype)


def operand_matmul(bits: int) -> Kernel:
    return lambda a, b: (round_mantissa(a, bits - 1, "nearest") @ round_mantissa(b, bits - 1, "nearest")).to(
        a.dtype
    )


def one_pass_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    m = xf.mean(-1, keepdim=True)
    var = (xf * xf).mean(-1, keepdim=True) - m * m
    return ((xf - m) / torch.sqrt(var.clamp_min(0) + 1e-5) * w.float() + b.float()).to(x.dtype)


def low_precision_rmsnorm(acc: torch.dtype) -> Kernel:
    def kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        sq = (x.float() ** 2).to(acc)
        total = torch.zeros(x.shape[:-1], dtype=acc)
        for j in range(0, x.shape[-1], 16):  # the sum of squares kept in acc
            total = (total.float() + sq[..., j : j + 16].float().sum(-1)).to(acc)
        scale = torch.rsqrt(total.float() / x.shape[-1] + 1e-5)
        return (x.float() * scale[..., None] * w.float()).to(x.dtype)

    return kernel


def corpus() -> list[Fault]:
    """Every planted fault: numerical kinds per family, dtype and magnitude; integrity kinds per family;
    mechanisms (exp overflow, accumulators, operand rounding, cancellation, row scale) where they apply."""
    out: list[Fault] = []
    salt = 0
    for family in SHAPES:
        for dtype, (small, large) in MAGNITUDE.items():
            kinds: list[tuple[str, str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]]] = [
                ("garbage-huge", "garbage", garbage_huge),
                ("garbage-shuffled", "garbage", garbage_shuffled),
                (f"offset-const-{small:g}", "offset", offset_const(small * 10)),
                (f"offset-const-{large:g}", "offset", offset_const(large * 10)),
                (f"offset-block-{large:g}", "offset", offset_block(large * 10)),
                ("sparse-1", "sparse", sparse(1, 0.5)),
                ("sparse-5", "sparse", sparse(5, 50.0)),
                (f"noise-{small:g}", "noise", noise(small)),
                # past D.ROUNDING_SCALE (fp8's unit roundoff) no rounding gives it: named no cause (issue 48)
                (f"noise-{large:g}", "noise" if large <= D.ROUNDING_SCALE else "exceeds-bound", noise(large)),
            ]
            if SHAPES[family][-1] >= 16 and family not in ("sum", "logsumexp"):
                kinds.append(("tail-zeroed", "tail-pattern", tail_zeroed))
            for name, expected, change in kinds:
                salt += 1
                kernel = _perturbed(family, change, salt)
                out.append(Fault(f"{name}/{family}/{dtype}", family, dtype, "C-PRC-01", expected, kernel))
        for name, expected, make in (
            ("input-mutated", "input-mutation", mutating),
            ("wrong-dtype", "wrong-dtype", wrong_dtype),
            ("stale-output", "stale-output", stale),
        ):
            out.append(
                Fault(f"{name}/{family}/float32", family, "float32", "C-PRC-01", expected, make(family))
            )
    for dtype in MAGNITUDE:
        for upcast in (
            (False, True) if dtype == "float32" else (True,)
        ):  # bf16 exp and sum fail before overflow
            tag = "fp32-exp" if upcast else "input-dtype-exp"
            out.append(
                Fault(
                    f"exp-overflow-{tag}/softmax/{dtype}",
                    "softmax",
                    dtype,
                    "C-PRC-02",
                    "overflow-nan",
                    naive_softmax(upcast),
                )
            )
            out.append(
                Fault(
                    f"exp-overflow-{tag}/logsumexp/{dtype}",
                    "logsumexp",
                    dtype,
                    "C-PRC-02",
                    "overflow-nan",
                    naive_logsumexp(upcast),
                )
            )
    for acc in (torch.float16, torch.bfloat16):
        name = str(acc).removeprefix("torch.")
        out.append(
            Fault(
                f"accumulator-{name}/matmul/float32",
                "matmul",
                "float32",
                "C-PRC-01",
                "low-precision-accumulator",
                acc_matmul(acc),
            )
        )
        out.append(  # the sum of squares kept in acc: named by its format since issue 33 (was row-scale)
            Fault(
                f"row-scale-{name}/rmsnorm/float32",
                "rmsnorm",
                "float32",
                "C-PRC-01",
                "low-precision-reduction",
                low_precision_rmsnorm(acc),
            )
        )
    for block, what in ((128, "blocks128"), (1, "sequential")):  # the rounding interval is fitted too
        out.append(
            Fault(
                f"accumulator-bfloat16-{what}/matmul/float32",
                "matmul",
                "float32",
                "C-PRC-01",
                "low-precision-accumulator",
                _blocked_acc(block),
            )
        )
    for bits in (11, 8):
        out.append(
            Fault(
                f"operands-{bits}bit/matmul/float32",
                "matmul",
                "float32",
                "C-PRC-03",
                "operand-truncation",
                operand_matmul(bits),
            )
        )
    out.append(
        Fault(
            "one-pass-variance/layernorm/float32",
            "layernorm",
            "float32",
            "C-PRC-02",
            "cancellation",
            one_pass_layernorm,
        )
    )
    return out


def finding(fault: Fault, seed: int) -> Any:
    """Run the fault's class check in process, at the family's corpus shape; its Finding."""
    from kcgate.contracts.records import Contract, Protocol
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.trial import CaseContext
    from kcgate.numerics.ops import OPS
    from kcgate.plan import Case

    contract = Contract(
        id=fault.id,
        klass=fault.klass,
        kernel="x:y",
        op=fault.family,
        dtypes=(fault.dtype,),
        protocol=Protocol(seeds=1, trials=2),
        params=fault.params,
    )
    case = Case(
        fault.id, fault.id, fault.klass, fault.family, fault.dtype, SHAPES[fault.family], 0, 1 + 7919 * seed
    )
    return CHECKS[fault.klass](
        CaseContext(contract=contract, case=case, kernel=fault.kernel, op=OPS[fault.family])
    )


def diagnose(fault: Fault, seed: int) -> str:
    """The fault's signature cause, or the status when there is none."""
    result = finding(fault, seed)
    return result.signature.cause if result.signature is not None else result.status


__all__ = ["Fault", "corpus", "diagnose", "finding", "math"]
