"""Tests for kcgate.numerics.oracles.native: the fused projection-and-norm kernel, built with the system compiler."""

from __future__ import annotations

import itertools
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from kcgate.numerics.oracles import native  # noqa: E402

HAS_CC = shutil.which((os.environ.get("CC") or "cc").split()[0]) is not None
needs_lib = pytest.mark.skipif(not HAS_CC, reason="no C compiler: the torch path is used instead")


def _layouts(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same values in every layout the kernel takes: rows, columns, a row stride wider than a row."""
    rows, width = x.shape
    wide = torch.zeros(rows, width + 7, dtype=x.dtype)
    wide[:, :width] = x
    return {"rows": x, "cols": x.mT.contiguous().mT, "strided": wide[:, :width]}


def _bound(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Worst-case fp32 dot-product error (any order, with FMA): (width + 1)·u·|v||x|."""
    return (x.shape[-1] + 1) * 2.0**-24 * (v.double().abs() @ x.double().abs().mT)


@needs_lib
def test_builds_and_shares_torchs_openmp_where_a_compiler_exists() -> None:
    lib = native.status()
    assert lib.lib is not None, lib.detail
    macros = subprocess.run(
        [*(os.environ.get("CC") or "cc").split(), "-march=native", "-dM", "-E", "-"],
        input="",
        capture_output=True,
        text=True,
    ).stdout
    if "__F16C__" in macros or ("__FLT16_MAX__" in macros and "__aarch64__" in macros):
        assert lib.fp16  # hardware fp16 conversion: fp16 operands take the native path
    assert "(cc: " in lib.detail and os.environ["KCGATE_CACHE_DIR"] in lib.detail  # the session cache
    if sys.platform == "linux":
        assert lib.openmp, lib.detail
        runtimes = native._openmp_runtimes()
        assert len(runtimes) == 1, runtimes  # torch's libgomp, not a second pool


@needs_lib
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("rows", "width", "k"),
    [
        (1, 1, 1),
        (5, 3, 2),
        (33, 31, 4),
        (257, 1000, 3),
        (300, 64, 7),
        (41, 37, 10),
        (70, 50, 16),
        (19, 130, 21),
    ],
)
def test_projection_and_norms_within_the_fp32_bound_in_every_layout(
    dtype: torch.dtype, rows: int, width: int, k: int
) -> None:
    """Widths off the 16-element vector step, row counts off the 4-row and column blocks, k off the groups of four
    streams (the norm and k vectors), and k past the 15 vectors that share one pass in the cols layout (16, 21)."""
    if dtype == torch.float16 and not native.status().fp16:
        pytest.skip("this compiler has no _Float16: fp16 takes the torch path")
    gen = torch.Generator().manual_seed(rows * 1000 + width + k)
    x = torch.randn(rows, width, generator=gen).to(dtype)
    v = torch.randn(k, width, generator=gen)
    exact = v.double() @ x.double().mT
    exact_norms = torch.linalg.vector_norm(x.double(), dim=-1)
    for name, layout in _layouts(x).items():
        done = native.project(layout, v)
        assert done is not None, name
        proj, norms = done
        assert proj.shape == (k, rows) and norms.shape == (rows,) and proj.dtype == torch.float32
        assert ((proj.double() - exact).abs() <= _bound(v, x)).all(), name
        torch.testing.assert_close(norms.double(), exact_norms, rtol=(width + 2) * 2.0**-24, atol=0.0)


@needs_lib
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_vectors_projection_does_not_depend_on_the_vectors_after_it(dtype: torch.dtype) -> None:
    """Each stream is its own sum: k = 10 (the last group runs three streams, no padding) gives the first ten
    rows of k = 11 (four streams) and the norms bit for bit, in every layout."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(45, 300, generator=gen).to(dtype)
    v = torch.randn(11, 300, generator=gen)
    for name, layout in _layouts(x).items():
        ten, eleven = native.project(layout, v[:10]), native.project(layout, v)
        assert ten is not None and eleven is not None, name
        assert torch.equal(ten[0], eleven[0][:10]) and torch.equal(ten[1], eleven[1]), name


@needs_lib
def test_broadcast_operands_with_zero_strides() -> None:
    """An expanded x (stride 0 down the rows, or across a row) is read in place, not copied."""
    v = torch.randn(2, 40)
    row = torch.randn(1, 40)
    for x in (row.expand(9, 40), torch.randn(9, 1).expand(9, 40)):
        done = native.project(x, v)
        assert done is not None
        assert ((done[0].double() - v.double() @ x.double().mT).abs() <= _bound(v, x)).all()


@needs_lib
def test_the_result_does_not_depend_on_the_thread_count() -> None:
    """Each row is summed by one thread in a fixed order: bit-identical with 1 or 2 threads."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(600, 513, generator=gen)
    v = torch.randn(2, 513, generator=gen)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native.project(x, v)
        torch.set_num_threads(2)
        two = native.project(x, v)
    finally:
        torch.set_num_threads(threads)
    assert one is not None and two is not None
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])


@needs_lib
def test_non_finite_values_propagate() -> None:
    x = torch.ones(3, 50)
    x[0, 7] = float("inf")
    x[1, 49] = float("nan")  # in the scalar tail of the row
    done = native.project(x, torch.ones(1, 50))
    assert done is not None
    proj, norms = done
    assert norms[0] == float("inf") and torch.isnan(norms[1]) and norms[2] == pytest.approx(50**0.5)
    assert proj[0, 0] == float("inf") and torch.isnan(proj[0, 1]) and proj[0, 2] == 50.0


@needs_lib
def test_out_is_written_in_place_and_checked() -> None:
    x, v = torch.randn(4, 10), torch.randn(2, 10)
    proj, norms = torch.empty(2, 4), torch.empty(4)
    done = native.project(x, v, out=(proj, norms))
    assert done is not None and done[0] is proj and done[1] is norms
    with pytest.raises(ValueError, match="shapes"):
        native.project(x, v, out=(torch.empty(4, 2), norms))
    with pytest.raises(ValueError, match="contiguous"):
        native.project(x, v, out=(torch.empty(4, 2).mT, norms))


def test_operands_it_does_not_take() -> None:
    v = torch.randn(2, 8)
    x = torch.randn(4, 8)
    assert native.applies(x, v)
    assert not native.applies(x.double(), v)
    assert not native.applies(x, v.double())
    assert not native.applies(x.unsqueeze(0), v)
    assert not native.applies(torch.randn(4, 16)[:, ::2], v)  # no unit stride either way
    assert not native.applies(torch.randn(0, 8), v)
    assert not native.applies(x, torch.randn(2, 9))
    assert not native.applies(x, torch.randn(0, 8))


def test_unavailable_compilers_give_a_reason_not_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = native.load(compiler="/nonexistent/cc", cache_dir=tmp_path)
    assert missing.lib is None and "no C compiler" in missing.detail
    failing = native.load(compiler="false", cache_dir=tmp_path)  # exists, rejects every flag set
    assert failing.lib is None and "could not build" in failing.detail
    assert len(list(tmp_path.glob("*.failed"))) == len(native._FLAG_SETS)
    again = native.load(compiler="false", cache_dir=tmp_path)
    assert again.lib is None and "rejected earlier" in again.detail
    monkeypatch.setenv("KCGATE_NATIVE", "0")
    assert native.load(cache_dir=tmp_path).detail == "disabled by KCGATE_NATIVE=0"


def _logging_compiler(tmp_path: Path, *reject: str) -> tuple[str, Path]:
    """A compiler wrapper that logs each call and rejects any command line containing one of ``reject``."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "cc-wrapper"
    patterns = "|".join(f"*{flag}*" for flag in reject)
    refuse = f'case "$*" in {patterns}) echo "unsupported flag" >&2; exit 1;; esac\n' if reject else ""
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\n{refuse}exec {os.environ.get("CC") or "cc"} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), log


@needs_lib
@pytest.mark.slow
def test_the_library_is_built_once_per_machine_and_rejected_flags_are_remembered(tmp_path: Path) -> None:
    compiler, log = _logging_compiler(tmp_path, "-mprefer-vector-width")
    cache = tmp_path / "cache"
    first = native.load(compiler=compiler, cache_dir=cache)
    assert first.lib is not None, first.detail
    assert len(log.read_text().splitlines()) == 2  # the first flag set rejected, the second built
    assert "-mprefer-vector-width" not in first.detail
    second = native.load(compiler=compiler, cache_dir=cache)
    assert second.lib is not None and second.detail == first.detail
    assert len(log.read_text().splitlines()) == 2  # nothing compiled again
    assert oct(cache.stat().st_mode & 0o777) == "0o700"


def test_an_upgraded_compiler_gets_a_fresh_build(tmp_path: Path) -> None:
    """The cache key covers the compiler's file, so flags an older compiler rejected are tried again."""
    compiler = tmp_path / "cc"
    compiler.write_text("#!/bin/sh\nexit 1\n")
    compiler.chmod(0o755)
    before = native._fingerprint(b"source", [str(compiler), "-O3"])
    assert native._fingerprint(b"source", [str(compiler), "-O3"]) == before
    compiler.write_text("#!/bin/sh\n# version 2\nexit 1\n")
    assert native._fingerprint(b"source", [str(compiler), "-O3"]) != before
    assert native._fingerprint(b"other source", [str(compiler), "-O3"]) != before


@needs_lib
@pytest.mark.slow
def test_the_portable_fallback_build_is_correct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler without -march=native or OpenMP (the last flag set, plain -O3): still right, one thread."""
    compiler, _ = _logging_compiler(tmp_path, "-march", "-fopenmp")
    plain = native.load(compiler=compiler, cache_dir=tmp_path / "cache")
    assert plain.lib is not None and plain.detail.endswith("-O3)") and not plain.openmp, plain.detail
    monkeypatch.setattr(native, "_LOADED", plain)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(70, 333, generator=gen)
    v = torch.randn(5, 333, generator=gen)
    for dtype in (torch.bfloat16, torch.float16) if plain.fp16 else (torch.bfloat16,):
        for layout in _layouts(x.to(dtype)).values():
            done = native.project(layout, v)
            assert done is not None
            assert ((done[0].double() - v.double() @ layout.double().mT).abs() <= _bound(v, layout)).all()


@needs_lib
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 vector widths")
@pytest.mark.parametrize(("march", "fp16"), [("haswell", True), ("x86-64-v2", False)])
@pytest.mark.slow
def test_other_x86_vector_widths_are_correct(
    march: str, fp16: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AVX2 (8 lanes, 2 rows a step, F16C) and SSE4.2 (4 lanes, no fp16), built here in place of -march=native."""
    wrapper = tmp_path / "cc-march"
    cc = os.environ.get("CC") or "cc"
    wrapper.write_text(
        '#!/bin/sh\nfor a; do shift; case $a in -march=native) set -- "$@" -march='
        + march
        + ';; -mprefer-vector-width=*) ;; *) set -- "$@" "$a";; esac; done\nexec '
        + cc
        + ' "$@"\n'
    )
    wrapper.chmod(0o755)
    built = native.load(compiler=str(wrapper), cache_dir=tmp_path / "cache")
    assert built.lib is not None and built.fp16 == fp16, built.detail
    monkeypatch.setattr(native, "_LOADED", built)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(37, 291, generator=gen)
    for k, dtype in itertools.product((4, 10, 17), (torch.float32, torch.bfloat16, torch.float16)):
        v = torch.randn(k, 291, generator=gen)
        for name, layout in _layouts(x.to(dtype)).items():
            done = native.project(layout, v)
            if dtype == torch.float16 and not fp16:
                assert done is None
                continue
            assert done is not None, (dtype, name)
            exact = v.double() @ layout.double().mT
            assert ((done[0].double() - exact).abs() <= _bound(v, layout)).all(), (dtype, name)
            norms = torch.linalg.vector_norm(layout.double(), dim=-1)
            torch.testing.assert_close(done[1].double(), norms, rtol=300 * 2.0**-24, atol=0.0)


@needs_lib
@pytest.mark.slow
def test_a_cache_others_can_write_to_is_not_loaded(tmp_path: Path) -> None:
    compiler, log = _logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    built = native.load(compiler=compiler, cache_dir=cache)
    assert built.lib is not None, built.detail
    library = next(cache.glob("*.so"))
    library.chmod(0o666)  # group- and world-writable: someone else could have replaced it
    replaced = native.load(compiler=compiler, cache_dir=cache)
    assert replaced.lib is not None and str(library) not in replaced.detail  # the next flag set, rebuilt
    cache.chmod(0o777)
    refused = native.load(compiler=compiler, cache_dir=cache)
    assert refused.lib is None and "writable by others" in refused.detail


@pytest.mark.slow
def test_freivalds_falls_back_to_torch_in_a_process_without_a_compiler() -> None:
    """A real process with CC pointing nowhere: checks still pass correct products and catch corruption."""
    script = textwrap.dedent(
        """
        import torch
        from kcgate.numerics.oracles import native
        from kcgate.numerics.oracles.freivalds import freivalds_check
        for dtype in (torch.float32, torch.bfloat16):
            gen = torch.Generator().manual_seed(1)
            a = torch.randn(64, 96, generator=gen).to(dtype)
            b = torch.randn(96, 48, generator=gen).to(dtype)
            c = a.float() @ b.float()
            good = freivalds_check(a, b, c)
            c[5, 6] += 100 * good.threshold
            print(dtype, good.passed, freivalds_check(a, b, c).passed)
        print(native.status().detail)
        """
    )
    env = {**os.environ, "CC": "/nonexistent/cc"}  # and the session's cache dir, already filled
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["torch.float32 True False", "torch.bfloat16 True False"]
    assert "no C compiler '/nonexistent/cc'" in lines[2]
