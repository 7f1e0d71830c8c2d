"""The range probes' inference and inputs (kcgate.numerics.domains): which probes the traced reference and the
inputs' domains call for, and what each probe's inputs hold."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kcgate.numerics import domains  # noqa: E402
from tests.testing.kernels import ranges  # noqa: E402

F = torch.nn.functional


def _samples(gen, shape=(8, 32), dtype=torch.float32):  # type: ignore[no-untyped-def]
    return [gen(shape, dtype, torch.Generator().manual_seed(k)) for k in range(2)]


def test_each_range_probe_is_inferred_from_the_reference_and_the_inputs_domains() -> None:
    signed, unit = _samples(ranges.normal_gen), _samples(ranges.unit_gen)
    assert domains.plan(ranges.softplus_ref, signed, torch.float32, set(), set()) == {
        "exp-range": ((0, "signed"),),
        "subnormal": ((0, "signed"),),
    }
    assert set(domains.plan(ranges.clamped_log_ref, unit, torch.float32, set(), set())) == {
        "log-range",
        "subnormal",
    }
    norm = domains.plan(ranges.rms_ref, _samples(ranges.norm_gen), torch.float32, set(), set())
    assert set(norm) == {"subnormal", "dynamic-range"}  # a reduction, no exp or log
    assert norm["dynamic-range"] == ((0, "signed"), (1, "nonneg"))
    # a shift-invariant input (the offset probe's) gets no exp-range; a left-alone input nothing
    softmax = lambda x: torch.softmax(x, -1)  # noqa: E731
    assert "exp-range" not in domains.plan(softmax, signed, torch.float32, set(), {0})
    # no dynamic range where it takes an exp: x − lse carries u·|x| in a correct kernel (a saved logsumexp), and
    # q and k through attention's scores go past exp's limits (exp-range's to probe); a reduction with no exp
    # keeps it, shifted or not (a layer norm divides by the spread)
    assert "dynamic-range" not in domains.plan(softmax, signed, torch.float32, set(), set())
    attention = lambda q, k: torch.softmax(q @ k.transpose(-1, -2), -1)  # noqa: E731
    pair = [(x, 2 * x + 0.5) for (x,) in signed]
    assert "dynamic-range" not in domains.plan(attention, pair, torch.float32, set(), set())
    layer_norm = lambda x: F.layer_norm(x, x.shape[-1:])  # noqa: E731
    assert "dynamic-range" in domains.plan(layer_norm, signed, torch.float32, set(), {0})
    assert domains.plan(softmax, signed, torch.float32, {0}, set()) == {}


def test_distributions_and_integer_valued_inputs_are_left_alone() -> None:
    def gen(shape, dtype, g):  # type: ignore[no-untyped-def]
        p = torch.softmax(torch.randn(shape, generator=g, dtype=torch.float64), -1).to(dtype)
        mask = (torch.rand(shape, generator=g) > 0.5).to(dtype)
        return p, mask

    def ref(p, mask):  # type: ignore[no-untyped-def]
        return (p.log() * mask).sum(-1)

    assert domains.plan(ref, _samples(gen), torch.float32, set(), set()) == {}
    assert domains.domain(torch.tensor([1.0, 0.0, 2.0])) == ""  # counts, a mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_probes_inputs_hold_what_they_say(dtype: torch.dtype) -> None:
    x = ranges.normal_gen((8, 64), dtype, torch.Generator().manual_seed(0))[0]
    g = torch.Generator().manual_seed(1)
    fi = torch.finfo(dtype)
    top, bottom = domains.EXP_LEVELS[0]
    e = domains.exp_range(x, top, bottom).double()
    assert float(e.max()) == pytest.approx(top, rel=fi.eps) and float(e.min()) == pytest.approx(
        bottom, rel=fi.eps
    )
    assert top > math.log(torch.finfo(torch.float32).max) > -2 * bottom  # past exp's overflow; exp(-x)² fits
    s = domains.subnormal(x, g).double()
    odd = s.flatten()[::2]
    assert bool(((odd.abs() < fi.tiny) & (odd != 0)).all()) and torch.equal(
        s.flatten()[1::2], x.double().flatten()[1::2]
    )
    assert bool((torch.sign(odd) == torch.sign(x.double().flatten()[::2])).all())
    p = ranges.unit_gen((8, 64), dtype, torch.Generator().manual_seed(0))[0]
    lo = domains.log_range(p, g).double().flatten()[::2]
    assert bool(((lo >= fi.tiny) & (lo < 2 * fi.tiny)).all())
    d = domains.dynamic_range(x, "signed", g).double()
    binades = torch.log2(d.abs().amax(-1) / x.double().abs().amax(-1))  # the rows' own factors differ
    assert float(binades.max() - binades.min()) >= 4
    assert bool(d.isfinite().all()) and bool((domains.dynamic_range(p, "unit+", g).double() <= 1).all())
