"""Close two gaps of Triton 3.9.0's interpreter (TRITON_INTERPRET=1) the way compiled Triton behaves.

1. A Python float argument: compiled Triton passes it as an fp32 scalar (``triton.runtime.jit.mangle_type(1e-5)
   == "fp32"``), so a kernel may call ``eps.to(tl.float32)``; the interpreter's ``_implicit_cvt`` wraps bools,
   ints and pointers but leaves a float a Python ``float``, and the call raises ``AttributeError: 'float' object
   has no attribute 'to'`` (Liger-Kernel's rms_norm, layer_norm and swiglu). Here a float becomes an fp32 scalar.
2. libdevice: ``from triton.language.extra.libdevice import rsqrt`` binds a stub whose body is ``...``; compiled
   Triton dispatches it to the backend's libdevice, the interpreter calls the stub, which returns None
   (Liger's rms_norm and layer_norm: ``cannot convert None ... to tensor``). Here each stub that has a
   ``tl.math`` builtin of the same name calls that builtin, which the interpreter does run.

Not closed: bf16 arithmetic, which the interpreter does on the uint16 bit patterns (probe_interpreter.py).
On PYTHONPATH as ``sitecustomize`` (run.sh puts it there); active only when TRITON_INTERPRET is 1 at start-up.
It changes no kernel source: what ``kcgate mutate`` mutates is Liger's own.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

INTERPRETER = "triton.runtime.interpreter"
LIBDEVICE = "triton.language.extra.libdevice"


def _patch_libdevice(libdevice: Any) -> None:
    """Each libdevice stub that has a ``tl.math`` builtin of the same name calls it instead (the interpreter
    patches ``tl.math`` while a kernel runs). Only names ``tl.math`` has are mapped (rsqrt, sqrt, exp, log,
    ...); tanh, for one, stays unsupported (Liger's geglu)."""
    import triton.language as tl

    for name in dir(libdevice):
        if not name.startswith("_") and callable(getattr(tl.math, name, None)):
            setattr(libdevice, name, _via_math(name))
    libdevice.KCGATE_MAPPED_TO_TL_MATH = True


def _via_math(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        import triton.language as tl

        return getattr(tl.math, name)(*args, **kwargs)  # looked up per call: the interpreter's patched one

    call.__name__ = name
    return call


def _patch_interpreter(interpreter: Any) -> None:
    import numpy as np
    import triton.language as tl

    original = interpreter._implicit_cvt

    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):  # bool and int are handled by the original, as are tensors
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return original(arg)

    interpreter._implicit_cvt = implicit_cvt
    interpreter.KCGATE_FLOAT_ARGS_AS_FP32 = True  # visible to a check that the shim is active


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        (_patch_interpreter if module.__name__ == INTERPRETER else _patch_libdevice)(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in (INTERPRETER, LIBDEVICE):
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


if os.environ.get("TRITON_INTERPRET") == "1":
    sys.meta_path.insert(0, _Finder())
