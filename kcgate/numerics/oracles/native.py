"""A fused projection-and-norm kernel for Freivalds' check, compiled from ``native.c`` on first use.

Freivalds' threshold needs each operand's row norms beside its projection ``v @ x.mT``. With torch that is
a GEMM and a norm pass, so every matrix is read from memory twice; the C kernel reads it once and does
both (fp32, bf16 or fp16 operands, either unit-stride layout). On an Intel Xeon VM it took 3.2 to 3.8 ms
for a 4096² fp32 matrix against 7.6 to 8.3 ms for torch's GEMM plus norm, and 3.7 to 4.3 ms to ``sum()``
the matrix (``benchmarks/freivalds_overhead.py`` times the whole check, both ways).

The library is built with the system C compiler (``$CC``, else ``cc``; about 0.4 s) on the first check that
can use it, once per machine: it is cached in ``$KCGATE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/kcgate`` or
``~/.cache/kcgate``, created private) under a name hashed from the source, the compiler, the flags and the
CPU, so ``-march=native`` never meets another machine's binary. A build goes to a temporary file renamed
into place, so concurrent workers do not collide, and a flag set the compiler rejects is remembered. A
cached file is loaded only if this user owns it and its directory and neither is writable by others (a
kernel under test runs as the same user, so on a shared self-hosted runner it could replace this file as
it could ``~/.bashrc``; docs/github.md says to use ephemeral runners where untrusted code runs).

It links OpenMP by soname, so in a process that has torch loaded it shares torch's libgomp and thread pool
rather than fighting it for cores; if a second OpenMP runtime shows up anyway, the kernel is not used.
Without a compiler, or with ``KCGATE_NATIVE=0``, :func:`project` returns None and the caller uses torch;
:func:`status` says why. The source is kcgate's own, shipped in the package: nothing from the repository
under test is compiled.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["Native", "applies", "disabled", "handles", "load", "project", "status"]

_SOURCE = Path(__file__).with_name("native.c")
_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_FLAG_SETS = (  # tried in order; the first that compiles and loads is used
    ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp"),
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3", "-march=native"),
    ("-O3",),
)


@dataclass(frozen=True)
class Native:
    """The loaded library (``lib`` is None when unavailable) and how it came to be, for diagnostics."""

    lib: ctypes.CDLL | None
    detail: str
    openmp: bool = False
    fp16: bool = False  # the compiler has _Float16


_LOADED: Native | None = None


@contextlib.contextmanager
def disabled(why: str = "disabled") -> Iterator[None]:
    """Within the block :func:`project` declines, so callers take the torch path (side-by-side timing, tests)."""
    global _LOADED
    saved, _LOADED = _LOADED, Native(None, why)
    try:
        yield
    finally:
        _LOADED = saved


def status() -> Native:
    """This process's library, built on first call (never raises)."""
    global _LOADED
    if _LOADED is None:
        _LOADED = load()
    return _LOADED


def load(compiler: str | None = None, cache_dir: Path | None = None) -> Native:
    """Build (or reuse) and load the library. Never raises: failures come back as ``Native(None, why)``."""
    if os.environ.get("KCGATE_NATIVE", "1") == "0":
        return Native(None, "disabled by KCGATE_NATIVE=0")
    cc = shlex.split(compiler or os.environ.get("CC") or "cc") or ["cc"]
    if shutil.which(cc[0]) is None:
        return Native(None, f"no C compiler {cc[0]!r} on PATH (set CC, or KCGATE_NATIVE=0 to silence)")
    try:
        directory = cache_dir or _cache_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home directory to put ~/.cache in
        return Native(None, f"cannot create the native kernel's cache: {exc} (set KCGATE_CACHE_DIR)")
    unsafe = _untrusted(directory)
    if unsafe:
        return Native(None, unsafe)
    source = _SOURCE.read_bytes()
    errors = []
    for flags in _FLAG_SETS:
        path = directory / f"native-{_fingerprint(source, [*cc, *flags])}.so"
        error = _build([*cc, *flags], path) or _untrusted(path)
        if error is None:
            try:
                lib = _bind(ctypes.CDLL(str(path)))
            except (OSError, AttributeError) as exc:
                error = str(exc)
        if error is not None:
            errors.append(f"{' '.join(flags)}: {error}")
            continue
        runtimes = _openmp_runtimes()
        if len(runtimes) > 1:  # our libgomp did not resolve to torch's: two thread pools would fight
            return Native(None, f"not used: two OpenMP runtimes loaded ({', '.join(sorted(runtimes))})")
        detail = f"{path} (cc: {' '.join(cc + list(flags))})"
        return Native(lib, detail, openmp=bool(lib.kc_has_openmp()), fp16=bool(lib.kc_has_fp16()))
    return Native(None, "could not build the native kernel: " + "; ".join(errors)[:2000])


def project(
    x: torch.Tensor, v: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(v @ x.mT, row norms of x)`` in fp32 from one pass over x, or None where the kernel does not apply.

    x is a 2-D CPU fp32, bf16 or fp16 tensor (fp16 where the build converts it in hardware: ``Native.fp16``)
    with unit stride along its rows or down its columns; v is (k, Q) fp32. The projection is fp32 with fp32 accumulation (any order); the norms are fp32 sums of squares, so
    they overflow to inf and underflow towards 0 where torch's do (the Freivalds check renorms such rows in
    fp64). ``out``: contiguous fp32 tensors of shapes (k, P) and (P,) to write into.
    """
    native = status()
    if native.lib is None or not applies(x, v) or (x.dtype == torch.float16 and not native.fp16):
        return None
    rows, width = x.shape
    cols = x.stride(-1) != 1
    v = v.contiguous()
    k = v.shape[0]
    proj, norms = out or (torch.empty((k, rows), dtype=torch.float32), torch.empty(rows, dtype=torch.float32))
    if not all(
        t.is_contiguous() and t.dtype == torch.float32 and t.device == x.device for t in (proj, norms)
    ):
        raise ValueError("out must be contiguous fp32 CPU tensors")
    if tuple(proj.shape) != (k, rows) or tuple(norms.shape) != (rows,):
        raise ValueError(f"out must have shapes ({k}, {rows}) and ({rows},)")
    rc = native.lib.kc_project(
        x.data_ptr(), _DTYPES[x.dtype], int(cols), rows, width, x.stride(-1 if cols else -2),
        v.data_ptr(), k, width, proj.data_ptr(), norms.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return (proj, norms) if rc == 0 else None


def handles(x: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the kernel takes these dtypes on this device (any shape): callers ask before :func:`status`,
    so that operands it can never take (fp64, a GPU) do not build the library."""
    return x.device.type == v.device.type == "cpu" and x.dtype in _DTYPES and v.dtype == torch.float32


def applies(x: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether :func:`project` can take these operands (dtype, device, shape, layout)."""
    if not handles(x, v) or x.dim() != 2 or v.dim() != 2 or v.shape[-1] != x.shape[-1]:
        return False
    if x.shape[0] == 0 or x.shape[1] == 0 or v.shape[0] == 0:
        return False
    return x.stride(-1) == 1 or x.stride(-2) == 1


def _cache_dir() -> Path:
    configured = os.environ.get("KCGATE_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kcgate"


def _fingerprint(source: bytes, command: list[str]) -> str:
    """Hash of what the binary depends on: the source, the compiler (its command, and its file's size and
    modification time, so an upgraded compiler builds afresh and retries flags the old one rejected) and
    flags, and the CPU."""
    cpu = platform.machine() + platform.processor()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            cpu += "".join(line for line in fh if line.startswith(("model name", "flags")))[:8192]
    compiler = ""
    found = shutil.which(command[0])
    if found:
        with contextlib.suppress(OSError):
            info = os.stat(os.path.realpath(found))
            compiler = f"{info.st_size}:{info.st_mtime_ns}"
    return hashlib.sha256(source + "\0".join([*command, compiler, cpu]).encode()).hexdigest()[:20]


def _build(command: list[str], path: Path) -> str | None:
    """Make sure ``path`` holds the library: reuse it, or compile to a temporary file and rename it into place.

    Returns None, or why not (the compiler's last line; remembered in ``<path>.failed`` so that later
    processes skip a flag set this compiler rejects)."""
    failed = path.with_suffix(".failed")
    if path.exists():
        return None
    if failed.exists():
        return f"rejected earlier ({failed})"
    try:
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        return f"cannot write the cache: {exc}"
    try:
        done = subprocess.run(
            [*command, "-shared", "-fPIC", "-o", tmp, str(_SOURCE)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode == 0:
            os.replace(tmp, path)
            return None
        said = (done.stderr or done.stdout).strip()
        error = said.splitlines()[-1] if said else f"exit status {done.returncode}"
        with contextlib.suppress(OSError):
            failed.write_text(error + "\n", encoding="utf-8")
        return error
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _untrusted(item: Path) -> str | None:
    """Why ``item`` must not be loaded from (not this user's, or writable by others), or None (POSIX only)."""
    if not hasattr(os, "getuid"):
        return None
    info = item.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return f"{item} is not this user's or is writable by others: not loaded (set KCGATE_CACHE_DIR)"
    return None


def _openmp_runtimes() -> set[str]:
    """Files of the OpenMP runtimes mapped into this process (Linux; elsewhere an empty set)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            paths = {line.split(maxsplit=5)[-1].strip() for line in fh if "omp" in line}
    except OSError:
        return set()
    names = ("libgomp", "libiomp", "libomp")
    return {os.path.realpath(p) for p in paths if os.path.basename(p).startswith(names)}


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    lib.kc_project.argtypes = [ptr, i32, i32, i64, i64, i64, ptr, i64, i64, ptr, ptr, i32]
    lib.kc_project.restype = i32
    for flag in (lib.kc_has_openmp, lib.kc_has_fp16):
        flag.argtypes = []
        flag.restype = i32
    return lib
