"""Kernels that return a wrong softmax (1.5x the right one) and lie about it (#44, the second attack suite):
each patches, caches, hides or forges something so that its own case would be recorded as a pass. Used
through real ``kcgate run`` workers (tests/execution/test_lying_kernels.py)."""

from __future__ import annotations

import builtins
import json
import math
import threading
import time
from typing import Any

import numpy as np
import torch

_SOFTMAX = torch.softmax


def _wrong(x: torch.Tensor) -> torch.Tensor:
    return _SOFTMAX(x, -1) * 1.5


_CACHE: dict[tuple[int, ...], torch.Tensor] = {}


def cached(x: torch.Tensor) -> torch.Tensor:
    """Computes once per shape, then hands back the same tensor, whatever the inputs."""
    if tuple(x.shape) not in _CACHE:
        _CACHE[tuple(x.shape)] = _SOFTMAX(x, -1)
    return _CACHE[tuple(x.shape)]


class _Liar(torch.Tensor):
    """A wrong tensor that turns into the right one as soon as any torch function reads it."""

    honest: torch.Tensor

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        args = tuple(a.honest if isinstance(a, _Liar) else a for a in args)
        return func(*args, **(kwargs or {}))


def subclass(x: torch.Tensor) -> torch.Tensor:
    out = _wrong(x).as_subclass(_Liar)
    out.honest = _SOFTMAX(x, -1)
    return out


def patch_numpy(x: torch.Tensor) -> torch.Tensor:
    """The comparison runs in numpy: every error it measures becomes zero."""
    np.abs = lambda a, *k, **kw: np.zeros_like(np.asarray(a, dtype=float))  # type: ignore[assignment]
    np.subtract = lambda a, b, *k, **kw: np.zeros_like(np.asarray(a, dtype=float))  # type: ignore[assignment]
    return _wrong(x)


def patch_builtins(x: torch.Tensor) -> torch.Tensor:
    builtins.max = lambda *a, **k: 0.0
    builtins.abs = lambda v: 0.0
    math.isfinite = lambda v: True
    return _wrong(x)


_DUMPS = json.dumps


def _pass(message: Any) -> Any:
    if isinstance(message, dict):
        if message.get("status") == "fail":
            message = {**message, "status": "pass", "signature": None, "message": ""}
        return {k: _pass(v) for k, v in message.items()}
    return message


def patch_json(x: torch.Tensor) -> torch.Tensor:
    """The worker signs whatever ``json.dumps`` returns: rewrite every ``fail`` to ``pass`` first."""
    json.dumps = lambda m, *a, **k: _DUMPS(_pass(m), *a, **k)
    return _wrong(x)


def patch_encoder(x: torch.Tensor) -> torch.Tensor:
    """The same through the encoder class ``json.dumps`` builds for ``allow_nan=False``."""
    encode = json.JSONEncoder.encode
    json.JSONEncoder.encode = lambda self, o: encode(self, _pass(o))  # type: ignore[method-assign]
    return _wrong(x)


def _toggle() -> None:
    """Patches torch's subtraction after the harness has checked, and puts it back before the case ends."""
    sub = torch.Tensor.__sub__
    time.sleep(0.01)
    torch.Tensor.__sub__ = lambda a, b: sub(a, a)  # type: ignore[method-assign,assignment]
    torch.sub = lambda a, b, **k: sub(a, a)  # type: ignore[assignment]
    time.sleep(2.0)
    torch.Tensor.__sub__ = sub  # type: ignore[method-assign]


def late_thread(x: torch.Tensor) -> torch.Tensor:
    threading.Thread(target=_toggle, daemon=True).start()
    return _wrong(x)


def patch_kcgate(x: torch.Tensor) -> torch.Tensor:
    """kcgate's own modules: the bound check and the metrics."""
    import kcgate.numerics.metrics as metrics

    for name in dir(metrics):
        if callable(getattr(metrics, name)) and not name.startswith("__"):
            setattr(metrics, name, lambda *a, **k: 0.0)
    return _wrong(x)


def sys_modules(x: torch.Tensor) -> torch.Tensor:
    """Replaces kcgate's modules in sys.modules with empty ones (a lazy import then finds the fake)."""
    import sys
    import types

    for name in [n for n in sys.modules if n.startswith("kcgate.")]:
        sys.modules[name] = types.ModuleType(name)
    return _wrong(x)


def default_dtype(x: torch.Tensor) -> torch.Tensor:
    """fp64 by default for everything after it, deterministic mode and one more thread."""
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(torch.get_num_threads() + 1)
    return _wrong(x)


class _BadText(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def bad_exception(x: torch.Tensor) -> torch.Tensor:
    raise _BadText()


def system_exit(x: torch.Tensor) -> torch.Tensor:
    raise SystemExit(0)


def keyboard_interrupt(x: torch.Tensor) -> torch.Tensor:
    raise KeyboardInterrupt


def exit_zero(x: torch.Tensor) -> torch.Tensor:
    import os

    os._exit(0)


def huge_alloc(x: torch.Tensor) -> torch.Tensor:
    torch.empty(1 << 50, dtype=torch.uint8)
    return _wrong(x)


def sleeper(x: torch.Tensor) -> torch.Tensor:
    time.sleep(600)
    return _wrong(x)


def returns_input(x: torch.Tensor) -> torch.Tensor:
    """Writes the wrong answer into its input and returns the input itself."""
    return x.copy_(_wrong(x))


def meta_output(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, device="meta")


def grad_tracking(x: torch.Tensor) -> torch.Tensor:
    w = torch.ones((), requires_grad=True)
    return _wrong(x) * w


def patch_record_class(x: torch.Tensor) -> torch.Tensor:
    """kcgate's result record is a class: its method, not a module's name, is rebound."""
    from kcgate.results.records import CaseResult

    to_json = CaseResult.to_json
    CaseResult.to_json = lambda self: _pass(to_json(self))  # type: ignore[method-assign]
    return _wrong(x)


def honest(x: torch.Tensor) -> torch.Tensor:
    return _SOFTMAX(x, -1)


def numpy_errstate(x: torch.Tensor) -> torch.Tensor:
    """numpy's error state is process-wide: every later overflow in the comparison raises."""
    np.seterr(all="raise")
    return _wrong(x)


def recursion_limit(x: torch.Tensor) -> torch.Tensor:
    import sys

    sys.setrecursionlimit(60)
    return _wrong(x)


def warnings_as_errors(x: torch.Tensor) -> torch.Tensor:
    import warnings

    warnings.simplefilter("error")
    return _wrong(x)


def flush_denormal(x: torch.Tensor) -> torch.Tensor:
    torch.set_flush_denormal(True)
    return _wrong(x)


_LIBS: list[Any] = []


def dispatcher(x: torch.Tensor) -> torch.Tensor:
    """Registers its own CPU kernel for aten::_softmax: torch.softmax everywhere, the fp64 oracle's included,
    then returns 1.5x the right answer and agrees with this kernel."""
    if not _LIBS:
        lib = torch.library.Library("aten", "IMPL")

        def fake(t: torch.Tensor, dim: int, half: bool) -> torch.Tensor:
            e = (t - t.amax(dim, keepdim=True)).exp()
            return e / e.sum(dim, keepdim=True) * 1.5

        lib.impl("_softmax", fake, "CPU")
        _LIBS.append(lib)
    return torch.softmax(x, -1)


def raises_workflow_commands(x: torch.Tensor) -> torch.Tensor:
    """Its error message is shown in run's console, the results file and every report format."""
    print("::error::printed by the kernel\n::add-mask::x", flush=True)
    raise RuntimeError(
        "boom\n::error file=a.py::forged\r\n::add-mask::secret\u2028::warning::w\x85::notice::n"
    )
