"""Why Liger-Kernel's kernels fail unmutated under TRITON_INTERPRET=1: three gaps of Triton's interpreter,
each shown on a minimal kernel (no Liger code), with and without interpreter_site/ on PYTHONPATH.

    TRITON_INTERPRET=1 PYTHONPATH=$LIGER_SITE python benchmarks/third_party/liger/probe_interpreter.py
    TRITON_INTERPRET=1 PYTHONPATH=benchmarks/third_party/liger/interpreter_site:$LIGER_SITE python ...

1. A Python float argument stays a Python float (compiled Triton passes an fp32 scalar): ``eps.to(...)`` raises.
2. A libdevice function imported by name (``from triton.language.extra.libdevice import rsqrt``) is a stub that
   returns None in the interpreter.
3. bf16 values are stored as uint16 and arithmetic on them is done on the bit patterns.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt


@triton.jit
def _scale(out_ptr, x_ptr, eps, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, tl.load(x_ptr + i) * eps.to(tl.float32))


@triton.jit
def _rsqrt(out_ptr, x_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, rsqrt(tl.load(x_ptr + i)))


@triton.jit
def _mul(out_ptr, a_ptr, b_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, tl.load(a_ptr + i) * tl.load(b_ptr + i))


def _try(name: str, got: object, want: torch.Tensor) -> None:
    if isinstance(got, Exception):
        print(f"{name}: raised {type(got).__name__}: {got}")
    else:
        ok = torch.equal(got, want)  # type: ignore[arg-type]
        print(f"{name}: {'as compiled' if ok else 'WRONG'}: got {got.tolist()}, want {want.tolist()}")  # type: ignore[attr-defined]


def _call(kernel: object, *args: object) -> object:
    out = torch.empty(4, dtype=args[0].dtype)  # type: ignore[attr-defined]
    try:
        kernel[(1,)](out, *args, N=4)  # type: ignore[index]
    except Exception as e:  # the interpreter's own error, reported as found
        return e
    return out


def main() -> None:
    import triton.runtime.interpreter as interp

    print(
        f"triton {triton.__version__}, TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}, "
        f"interpreter_site active: {getattr(interp, 'KCGATE_FLOAT_ARGS_AS_FP32', False)}"
    )
    x = torch.tensor([1.0, 4.0, 0.25, 16.0])
    _try("1. float argument .to(tl.float32)", _call(_scale, x, 0.5), x * 0.5)
    _try("2. libdevice rsqrt", _call(_rsqrt, x), torch.rsqrt(x))
    a = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=torch.bfloat16)
    b = torch.tensor([2.0, 0.5, -4.0, 3.0], dtype=torch.bfloat16)
    _try("3. bf16 a * b", _call(_mul, a, b), a * b)


if __name__ == "__main__":
    main()
