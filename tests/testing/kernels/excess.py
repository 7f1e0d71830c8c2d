"""Kernels for the sensitivity gate (tests/engine/test_sensitivity.py): within the error bound, yet wrong in ways
a correct implementation never is, and correct kernels in other summation orders.

The faulty ones measure a correct kernel's error on their own inputs (in fp64) and scale it, so "2x" and
"10x" mean what they say whatever the inputs.
"""

from __future__ import annotations

import torch


def _gen(x: torch.Tensor) -> torch.Generator:
    """A generator seeded from the inputs: the fault differs per trial but is reproducible."""
    return torch.Generator().manual_seed(int(x.double().abs().sum().item() * 1e3) % (2**31))


def sequential_sum(x: torch.Tensor) -> torch.Tensor:
    """A correct row sum in another order: one running fp32 accumulator, left to right."""
    acc = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for j in range(x.shape[-1]):
        acc = acc + x[..., j].float()
    return acc.to(x.dtype)


def blocked_sum(x: torch.Tensor) -> torch.Tensor:
    """A correct row sum in another order: reversed, in blocks of 100 summed sequentially."""
    parts = [x[..., j : j + 100].float().sum(-1) for j in range(0, x.shape[-1], 100)][::-1]
    acc = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for p in parts:
        acc = acc + p
    return acc.to(x.dtype)


def sequential_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A correct matmul in another order: one fp32 rank-1 update per k (a running sum per element)."""
    a32, b32 = a.float(), b.float()
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        acc = acc + a32[:, k : k + 1] * b32[k : k + 1, :]
    return acc.to(a.dtype)


def split_k_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A correct matmul in another order: split-K in 4 slices, reversed."""
    k = a.shape[1]
    cuts = [0, k // 4, k // 2, 3 * k // 4, k]
    parts = [a[:, s:e].float() @ b[s:e].float() for s, e in zip(cuts, cuts[1:])]
    return sum(reversed(parts), torch.zeros(())).to(a.dtype)


def sum_offsets(x: torch.Tensor) -> torch.Tensor:
    """Row sums plus schedule-dependent offsets (by row block) of up to 3.8% of |sum|: within the bound
    (budget about 0.7 at n = 1e5), 1000x a correct kernel's error."""
    s = x.double().sum(-1)
    block = torch.arange(x.shape[0], dtype=torch.float64).remainder(4) / 3  # 0, 1/3, 2/3, 1 by row block
    return (s + 0.038 * s.abs().clamp_max(300.0) * block).to(x.dtype)


def _noisy(exact: torch.Tensor, correct: torch.Tensor, times: float, gen: torch.Generator) -> torch.Tensor:
    """exact + Gaussian noise whose RMS is ``times`` the RMS error of ``correct``, per row scale."""
    e = correct.double() - exact
    rms = e.pow(2).mean().sqrt()
    return exact + times * rms * torch.randn(exact.shape, generator=gen, dtype=torch.float64)


def matmul_noise_2x(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Diffuse noise at 2x the error of a correct kernel (the sequential-order one in fp32, torch's in
    low precision: the largest a correct kernel of that precision makes)."""
    exact = a.double() @ b.double()
    correct = sequential_matmul(a, b) if a.dtype == torch.float32 else a @ b
    return _noisy(exact, correct, 2.0, _gen(a)).to(a.dtype)


def sum_noise_2x(x: torch.Tensor) -> torch.Tensor:
    exact = x.double().sum(-1)
    return _noisy(exact, sequential_sum(x), 2.0, _gen(x)).to(x.dtype)


def matmul_one_element_10x(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Correct everywhere but one element, whose error is 10x the correct kernel's largest error."""
    exact = a.double() @ b.double()
    correct = sequential_matmul(a, b) if a.dtype == torch.float32 else a @ b
    out = correct.double()
    worst = (out - exact).abs().max()
    i = int(torch.randint(0, out.numel(), (1,), generator=_gen(a)))
    out.view(-1)[i] = exact.view(-1)[i] + 10 * worst
    return out.to(a.dtype)


# ---- correct kernels in other orders that the default gate (the composite's error) must pass ----------


def _tree(x: torch.Tensor) -> torch.Tensor:
    """Pairwise (tree) sum over the last dimension in fp32, as a Triton ``tl.sum`` over one block."""
    n = x.shape[-1]
    x = torch.nn.functional.pad(x.float(), (0, (1 << (n - 1).bit_length()) - n))
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def _blocked(x: torch.Tensor, block: int) -> torch.Tensor:
    """A tree within blocks, a running fp32 sum across them (a Triton row reduction looping over blocks)."""
    acc = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for j in range(0, x.shape[-1], block):
        acc = acc + _tree(x[..., j : j + block])
    return acc


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    return _tree(x).to(x.dtype)


def blocked_sum_1024(x: torch.Tensor) -> torch.Tensor:
    return _blocked(x, 1024).to(x.dtype)


def blocked_sum_128(x: torch.Tensor) -> torch.Tensor:
    return _blocked(x, 128).to(x.dtype)


def tiled_matmul_32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """K tiles of 32 (each a block product), accumulated in fp32 tile after tile: Triton's ``acc += tl.dot``."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(0, a.shape[1], 32):
        acc = acc + a[:, k : k + 32].float() @ b[k : k + 32].float()
    return acc.to(a.dtype)


def liger_softmax(x: torch.Tensor) -> torch.Tensor:
    """Liger's single-block softmax: max, exp in fp32, a tree sum, a division."""
    x32 = x.float()
    e = torch.exp(x32 - x32.max(-1, keepdim=True).values)
    return (e / _tree(e)[..., None]).to(x.dtype)


def online_softmax(x: torch.Tensor) -> torch.Tensor:
    """Online softmax over blocks of 128 (running max, rescaled running sum), then a multiply by 1/sum."""
    x32 = x.float()
    m = torch.full(x.shape[:-1], -torch.inf)
    d = torch.zeros(x.shape[:-1])
    for j in range(0, x.shape[-1], 128):
        blk = x32[..., j : j + 128]
        new = torch.maximum(m, blk.max(-1).values)
        d = d * torch.exp(m - new) + _tree(torch.exp(blk - new[..., None]))
        m = new
    return (torch.exp(x32 - m[..., None]) * (1 / d)[..., None]).to(x.dtype)


def tree_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two passes with tree sums in fp32 (mean, then centred variance), rsqrt, weight and bias."""
    x32, n = x.float(), x.shape[-1]
    d = x32 - (_tree(x32) / n)[..., None]
    var = _tree(d * d) / n
    return (d * torch.rsqrt(var + 1e-5)[..., None] * w.float() + b.float()).to(x.dtype)


def blocked_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The sum of squares in blocks of 256, a division by the root mean square."""
    x32 = x.float()
    ms = _blocked(x32 * x32, 256) / x.shape[-1]
    return (x32 / torch.sqrt(ms + 1e-5)[..., None] * w.float()).to(x.dtype)


# ---- torch's own result plus unbiased noise at 2x its error (the gate must fail it) -------------------


def _plus_noise(family: str, times: float):  # type: ignore[no-untyped-def]
    """torch's composite for ``family`` plus Gaussian noise whose scale, element by element, is ``times``
    the composite's own error against the fp64 oracle: unbiased, rms ``times`` torch's error (√(1 + times²)
    times it with torch's own error included)."""
    from kcgate.numerics.ops import OPS

    op = OPS[family]

    def kernel(*x: torch.Tensor) -> torch.Tensor:
        up = tuple(t.double() if t.is_floating_point() else t for t in x)
        out = op.composite(*x).double()
        err = (out - op.oracle(*up)).abs()
        noise = torch.randn(out.shape, generator=_gen(x[0]), dtype=torch.float64)
        return (out + times * err * noise).to(x[0].dtype)

    return kernel


noise_2x_matmul = _plus_noise("matmul", 2.0)
noise_2x_sum = _plus_noise("sum", 2.0)
noise_2x_softmax = _plus_noise("softmax", 2.0)
noise_2x_layernorm = _plus_noise("layernorm", 2.0)
noise_2x_rmsnorm = _plus_noise("rmsnorm", 2.0)
noise_2x_linear = _plus_noise("linear", 2.0)
noise_2x_logsumexp = _plus_noise("logsumexp", 2.0)


# ---- the relative tolerance ---------------------------------------------------------------------------


def _scaled_bf16_error(a: torch.Tensor, b: torch.Tensor, times: float) -> torch.Tensor:
    """fp32 output whose error is exactly ``times`` torch's bf16 matmul error, element by element."""
    exact = a.double() @ b.double()
    return (exact + times * ((a @ b).double() - exact)).float()


def relative_1_5x(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _scaled_bf16_error(a, b, 1.5)


def relative_3x(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _scaled_bf16_error(a, b, 3.0)


def garbage_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Wrong by orders of magnitude (a Triton bf16 tl.dot returning ~1e11 in the interpreter)."""
    return torch.full((a.shape[0], b.shape[1]), 6e11, dtype=torch.float32)


def garbage_baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A baseline that is itself garbage: its error would excuse anything without the bound."""
    return torch.full((a.shape[0], b.shape[1]), -1e12, dtype=a.dtype)


def raising_baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A baseline that cannot run on the case's inputs."""
    raise ValueError("this baseline takes no matmul inputs")


def wrong_shape_baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A baseline of another output's shape."""
    return a @ b[:, :1]


# ---- Freivalds (oracle = "freivalds") ------------------------------------------------------------------


def matmul_plus_1e3_noise(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C + 0.001·randn: within the fp32 bound at K = 512, 20x a correct product's error."""
    c = a @ b
    return c + 0.001 * torch.randn(c.shape, generator=_gen(a))


def matmul_five_bad_elements(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Five corrupted elements in two rows (3 in row 1, 2 in row 7), each far over the bound."""
    c = (a @ b).clone()
    for i, j in ((1, 0), (1, 5), (1, 9), (7, 2), (7, 3)):
        c[i, j] += 100.0
    return c


def aten_gelu(x: torch.Tensor) -> torch.Tensor:
    """torch's own fp32 gelu with oneDNN off: ATen's kernel, the one inductor emits and the one eager torch
    runs on CPUs without AVX-512; oneDNN's AVX-512 gelu is 4x more accurate for |x| < 1.5."""
    from kcgate.engine.sensitivity import onednn_off

    with onednn_off():
        return torch.nn.functional.gelu(x)


def sharp_with_onednn(x: torch.Tensor) -> torch.Tensor:
    """A baseline correctly rounded when oneDNN is on and ATen's gelu when it is off: the seam the gate's
    two CPU references go through, whatever this CPU's oneDNN kernels are."""
    if torch.backends.mkldnn.enabled:
        return torch.nn.functional.gelu(x.double()).to(x.dtype)
    return torch.nn.functional.gelu(x)
