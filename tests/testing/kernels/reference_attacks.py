"""References and input generators that edit the judge (issue 54, build item 1): each returns what an honest
one returns (a softmax; a seeded normal draw) and changes, in its own process, what computes the verdict:
kcgate's error function's code in place, the names it is bound to, torch's, numpy's and builtins' functions.
The kernels judged by them are 5% off. With the reference and the generator in a sandbox child of their own
(kcgate.sandbox.reference), none of it reaches the judge. Used through real ``kcgate run`` workers
(tests/sandbox/test_reference_attacks.py)."""

from __future__ import annotations

import builtins

import numpy as np
import torch

_SOFTMAX = torch.softmax


def _zeros(t, r):  # type: ignore[no-untyped-def]
    import numpy

    return numpy.zeros(numpy.shape(r))


def _code_swap() -> None:
    import kcgate.numerics.metrics as metrics

    metrics.minus.__code__ = _zeros.__code__


def _rebind() -> None:
    import kcgate.engine.harness as harness
    import kcgate.numerics.metrics as metrics

    for module in (metrics, harness):
        for name in ("minus", "compare", "to_metrics", "f64", "host"):
            if hasattr(module, name):
                setattr(module, name, lambda *a, **k: np.zeros(1))


def _patch_torch() -> None:
    torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)  # type: ignore[method-assign,assignment]
    torch.Tensor.abs = lambda a: torch.zeros_like(a)  # type: ignore[method-assign,assignment]
    torch.sub = lambda a, b, **k: torch.zeros_like(a)  # type: ignore[assignment]
    torch.allclose = lambda *a, **k: True  # type: ignore[assignment]


def _patch_numpy() -> None:
    np.subtract = lambda a, b, **k: np.zeros(np.shape(b))  # type: ignore[assignment]
    np.abs = np.absolute = lambda a, **k: np.zeros(np.shape(a))  # type: ignore[assignment]


_MAX = builtins.max


def _patch_builtins() -> None:
    """abs, and max of floats, made to report nothing (max of ints kept: torch's own Python needs it)."""
    builtins.max = lambda *a, **k: 0.0 if all(isinstance(v, float) for v in a) else _MAX(*a, **k)  # type: ignore[assignment]
    builtins.abs = lambda a: 0.0  # type: ignore[assignment]


ATTACKS = {
    "code_swap": _code_swap,
    "rebind": _rebind,
    "patch_torch": _patch_torch,
    "patch_numpy": _patch_numpy,
    "patch_builtins": _patch_builtins,
}


def _reference(attack: str):  # type: ignore[no-untyped-def]
    def ref(x: torch.Tensor) -> torch.Tensor:
        out = _SOFTMAX(x, -1)
        ATTACKS[attack]()
        return out

    return ref


def _generator(attack: str):  # type: ignore[no-untyped-def]
    def gen(shape, dtype, g):  # type: ignore[no-untyped-def]
        x = torch.randn(shape, generator=g).to(dtype)
        ATTACKS[attack]()
        return (x,)

    return gen


ref_code_swap, ref_rebind, ref_patch_torch, ref_patch_numpy, ref_patch_builtins = map(_reference, ATTACKS)
gen_code_swap, gen_rebind, gen_patch_torch, gen_patch_numpy, gen_patch_builtins = map(_generator, ATTACKS)


def ref(x: torch.Tensor) -> torch.Tensor:
    """The honest reference: a softmax."""
    return _SOFTMAX(x, -1)


def gen(shape, dtype, g):  # type: ignore[no-untyped-def]
    """The honest generator: a seeded normal draw."""
    return (torch.randn(shape, generator=g).to(dtype),)


def exits(x: torch.Tensor) -> torch.Tensor:
    """A baseline that ends its process (it ended the judge's while the baseline ran there)."""
    import os

    os._exit(3)


def off(x: torch.Tensor) -> torch.Tensor:
    """The kernel judged: a softmax 5% off, through torch.softmax as it finds it."""
    return torch.softmax(x, -1) * 1.05
