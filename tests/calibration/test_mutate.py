"""kcgate mutate's engine: each rule plants its bug on a sample kernel (torch and Triton source), and the
contracts in examples/mutation kill a mutant of every rule in real worker processes; equivalent mutants,
mutants within rounding, the unmutated kernel's false alarms, the cache, the budget and a hanging mutant."""

from __future__ import annotations

import ast
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from kcgate.calibration import mutants as mm
from kcgate.calibration import mutate as mut
from kcgate.calibration import mutate_sites as ms
from kcgate.contracts.load import load_project
from kcgate.execution.pool import make_executor
from kcgate.render import mutation as render
from kcgate.results.model import CaseResult, Metrics, Status
from kcgate.vocab.mutation_rules import BY_NAME, FAMILIES, RULES
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "mutation" / "contracts.toml"

TORCH = textwrap.dedent(
    """
    import math
    import torch

    def rmsnorm(x, w):
        xf = x.to(torch.float32)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def softmax(x):
        m = x.amax(-1, keepdim=True)
        e = torch.exp(x - m)
        return e / e.sum(-1, keepdim=True, dtype=torch.float32)

    def attention(q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, -1) @ v

    def rotate(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((-x2, x1), -1)

    def blocked_sum(x, block=64):
        acc = torch.zeros(x.shape[0], dtype=torch.float32)
        for start in range(0, x.shape[1], block):
            acc = acc + x[:, start:start + block].float().sum(-1)
        return acc

    def unrelated(x):
        return x.float() * 0.5

    class Silu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * torch.sigmoid(x)

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x)
            return dy * s * (1 + x * (1 - s))

    def silu(x):
        return Silu.apply(x)
    """
)

# Triton source text: the rules read it as an AST, Triton need not be installed
TRITON = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _online_softmax(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m_i = -float("inf")
        l_i = 0.0
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(in_ptr + row * n + offs, mask=offs < n, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m_i, tl.max(x, axis=0))
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(tl.exp(x - m_new), axis=0)
            acc += x
            m_i = m_new
        tl.store(out_ptr + row, m_i + tl.log(l_i))

    def online_softmax(x):
        out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(x.numel(), x.shape[1]),)
        _online_softmax[grid](out, x, x.shape[1], BLOCK=128)
        return out
    """
)

ROPE_TRITON = textwrap.dedent(
    """
    import triton
    import triton.language as tl

    @triton.jit
    def _rope_kernel(q_ptr, cos_ptr, sin_ptr, half: tl.constexpr):
        offs = tl.arange(0, half)
        q1 = tl.load(q_ptr + offs)
        q2 = tl.load(q_ptr + half + offs)
        cos = tl.load(cos_ptr + offs)
        sin = tl.load(sin_ptr + offs)
        tl.store(q_ptr + offs, q1 * cos - q2 * sin)
        tl.store(q_ptr + half + offs, q2 * cos + q1 * sin)
    """
)

# (rule, source, kernel, a line the mutant must contain): each rule's intended mutant
CASES = [
    ("upcast-dropped", TORCH, "rmsnorm", "xf = x\n"),
    ("upcast-dropped", TRITON, "online_softmax", "other=-float('inf'))"),
    ("accumulator-dropped", TORCH, "softmax", "e.sum(-1, keepdim=True)"),
    ("accumulator-dropped", TRITON, "online_softmax", "acc = tl.zeros([BLOCK], dtype=tl.bfloat16)"),
    ("neg-inf-to-zero", TORCH, "attention", ".triu(1), 0.0)"),
    ("neg-inf-to-zero", TRITON, "online_softmax", "mask=offs < n, other=0.0)"),
    ("mask-boundary", TRITON, "online_softmax", "mask=offs <= n"),
    ("offset-off-by-one", TRITON, "online_softmax", "offs = start + tl.arange(0, BLOCK) + 1"),
    ("offset-off-by-one", TORCH, "blocked_sum", "x[:, start:start + block + 1]"),
    ("tail-dropped", TORCH, "blocked_sum", "range(0, x.shape[1] - block, block)"),
    ("tail-dropped", TRITON, "online_softmax", "x.numel() // x.shape[1]"),
    ("constant-changed", TORCH, "rmsnorm", "+ 1e-05"),
    ("constant-changed", TORCH, "rmsnorm", "+ 2e-06"),
    ("factor-dropped", TORCH, "attention", "s = q @ k.transpose(-2, -1)\n"),
    ("sign-flipped", TORCH, "rotate", "torch.cat((x2, x1), -1)"),
    ("sign-flipped", ROPE_TRITON, "_rope_kernel", "q1 * cos + q2 * sin"),
    ("max-subtraction-removed", TORCH, "softmax", "e = torch.exp(x)"),
    ("max-subtraction-removed", TRITON, "online_softmax", "tl.sum(tl.exp(x), axis=0)"),
    ("rescale-removed", TRITON, "online_softmax", "l_i = l_i + tl.sum("),
    ("accumulate-overwrites", TRITON, "online_softmax", "acc = x"),
    ("accumulate-overwrites", TORCH, "blocked_sum", "acc = x[:, start:start + block].float().sum(-1)"),
    ("gradient-term-dropped", TORCH, "silu", "return dy * s * (x * (1 - s))"),
    ("gradient-term-dropped", TORCH, "silu", "return dy * s * (1 + x * (-s))"),
]


def test_every_rule_is_one_row_of_the_table_and_has_a_sample() -> None:
    assert len(BY_NAME) == len(RULES)
    assert all(r.family in FAMILIES and r.bug and r.applies for r in RULES)
    assert {c[0] for c in CASES} == set(BY_NAME)
    assert {r.family for r in RULES} == set(FAMILIES)


@pytest.mark.parametrize(("rule", "source", "kernel", "expected"), CASES)
def test_rule_plants_its_bug(rule: str, source: str, kernel: str, expected: str) -> None:
    mutants = ms.generate(source, kernel, "c", (BY_NAME[rule],))
    assert mutants, f"{rule} found no site in {kernel}"
    assert all(m.rule == rule and m.family == BY_NAME[rule].family for m in mutants)
    hits = [m for m in mutants if expected in m.source and expected not in source]
    assert hits, f"{rule}: no mutant has {expected!r}: {[m.change for m in mutants]}"
    for m in mutants:  # one site each: the mutant parses and differs from the original in one place
        ast.parse(m.source)
        assert m.diff.count("\n-") >= 1 and m.source != source


def test_scope_is_the_kernel_and_what_it_reaches_in_its_module() -> None:
    tree = ast.parse(TRITON)
    names = [getattr(s, "name", "") for s in ms.scope(tree, "online_softmax")]
    assert names == ["_online_softmax", "online_softmax"]  # the launcher and the @triton.jit kernel it calls
    tree = ast.parse(TORCH)
    assert [getattr(s, "name", "") for s in ms.scope(tree, "silu")] == [
        "Silu",
        "silu",
    ]  # the autograd Function
    assert not any("unrelated" in m.diff for m in ms.generate(TORCH, "rmsnorm"))


def test_rules_outside_their_place_do_not_fire() -> None:
    src = "def backward_free(x, n):\n    if n < 3:\n        return x - x\n    return -1 * x\n"
    assert ms.generate(src, "backward_free", rules=(BY_NAME["mask-boundary"],)) == []  # an if test
    assert ms.generate(src, "backward_free", rules=(BY_NAME["sign-flipped"],)) == []  # a constant -1
    plain = "def f(a, b):\n    return a + b\n"
    assert ms.generate(plain, "f", rules=(BY_NAME["gradient-term-dropped"],)) == []  # not a backward
    index = "def _bwd(dx_ptr, row, stride, dy, y):\n    dx_ptr += row * stride\n    return dy - y + 1\n"
    grads = ms.generate(
        index, "_bwd", rules=(BY_NAME["gradient-term-dropped"], BY_NAME["accumulate-overwrites"])
    )
    assert {g.change for g in grads} == {
        "term 1 dropped",
        "term dy - y dropped",
        "term y dropped",
        "term dy dropped",
    }


def test_splice_keeps_precedence() -> None:
    src = "def f(x):\n    return x ** 0.5 * 3.0\n"
    for m in ms.generate(src, "f", rules=(BY_NAME["constant-changed"],)):
        ast.parse(m.source)
    src = "def backward(a, b, c):\n    return c * (a - b)\n"
    out = {m.source.splitlines()[1].strip() for m in ms.generate(src, "backward")}
    assert out == {"return c * (-b)", "return c * (a)"}  # the source's own parentheses kept
    src = "def backward(a, b, c):\n    return c * a - b\n"
    out = {m.source.splitlines()[1].strip() for m in ms.generate(src, "backward")}
    assert out == {"return c * a", "return -b"}
    src = "def f(x, m):\n    return 2.0 * (x - m) ** 2\n"
    for m in ms.generate(src, "f"):
        ast.parse(m.source)
    (drop,) = ms.generate("def f(x, m):\n    return x * (2.0 * m)\n", "f", rules=(BY_NAME["factor-dropped"],))
    assert "return x * (m)" in drop.source


def test_relative_imports_become_absolute() -> None:
    src = "from .backward import X\nfrom . import y\nimport torch\n"
    out = ms.absolute_imports(src, "pkg.sub.mod", is_package=False)
    assert "from pkg.sub.backward import X" in out and "from pkg.sub import y" in out


@pytest.mark.parametrize(
    "src",
    [
        "from\t.x import y\n",
        "from \\\n  .x import y\n",
        "if 1:\n    from ..a import b\n",
        "from.x import y\n",
    ],
)
def test_every_spelling_of_a_relative_import_is_made_absolute(src: str) -> None:
    """#44: a module with no ``from .`` in its text skips the second parse; each of these spellings has one."""
    out = ms.absolute_imports(src, "pkg.sub.mod", is_package=False)
    assert "from pkg." in out and ".x" not in out.replace("pkg.sub.x", "") and "..a" not in out, out


def _case(status: str, err: float | None, budget: float | None = None) -> CaseResult:
    m = Metrics(budget_used=budget if budget is not None else err, max_abs_err=err)
    return CaseResult("c/float32/4/s0", "c", "C-PRC-01", "softmax", "float32", (4,), 0, status, m)


def test_classify_equivalent_within_rounding_and_survivor() -> None:
    original = [_case(Status.PASS, 1e-7), _case(Status.PASS, 2e-7)]
    assert mut.classify(original, list(original)) == mm.EQUIVALENT
    assert mut.classify(original, [_case(Status.PASS, 1.5e-7), _case(Status.PASS, 2e-7)]) == mm.ROUNDED
    assert mut.classify(original, [_case(Status.PASS, 9e-7), _case(Status.PASS, 2e-7)]) == mm.SURVIVED


def test_kill_rate_leaves_out_equivalent_rounding_and_not_run() -> None:
    m = mm.Mutant("c", "r", "precision", "L1C0#0", 1, "x", "", "k")
    rs = [mm.MutantResult(m, o) for o in (mm.KILLED, mm.KILLED, mm.SURVIVED, mm.EQUIVALENT, mm.ROUNDED)]
    assert mm.kill_rate(rs) == round(2 / 3, 4)
    assert mm.kill_rate([mm.MutantResult(m, mm.NOT_RUN)]) is None
    r = replace(rs[0], advice=("add a C-PRC-02 contract",), budget_used=0.5)
    assert mm.MutantResult.from_json(json.loads(json.dumps(r.to_json()))) == r


def _run(tmp_path: Path, **kw: object) -> mm.MutationReport:
    return mut.mutate(
        [load_project(EXAMPLE)],
        lambda p: make_executor("process", p, "cpu"),
        advice=False,
        cache_dir=tmp_path / "cache",
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[mm.MutationReport, Path]:
    """examples/mutation under its hand-written contracts, run once for the tests below (about 15 s)."""
    root = tmp_path_factory.mktemp("mutate-example")  # _run keeps its cache in root / "cache"
    return _run(root), root


# Each rule's intended mutant in examples/mutation, and the hand-written contract that fits the bug:
# (contract, the mutant's change). The kernels are blocked like Triton kernels (kernels.py).
INTENDED = {
    "upcast-dropped": ("rmsnorm-bf16", ".to(torch.float32) dropped"),
    "accumulator-dropped": ("row-sum-tail", "accumulator dtype torch.float32 -> bfloat16"),
    "neg-inf-to-zero": ("softmax-stable", "-math.inf -> 0.0"),
    "mask-boundary": ("row-sum-tail", "< -> <="),
    "offset-off-by-one": ("row-sum-tail", "offsets + 1"),
    "tail-dropped": ("row-sum-tail", "ceil division -> floor"),
    "constant-changed": ("gelu-erf", "0.5 x 2"),
    "factor-dropped": ("attention-fp32", "factor scale dropped"),
    "sign-flipped": ("rope-neox", "-x[..., half:] -> x[..., half:]"),
    "max-subtraction-removed": ("softmax-stable", "- xf.amax(-1, keepdim=True) removed"),
    "rescale-removed": ("logsumexp-online", "rescale by alpha removed"),
    "accumulate-overwrites": ("row-sum-tail", "+= -> ="),
    "gradient-term-dropped": ("silu-backward", "term x * (1 - s) dropped"),
}


def test_every_rule_has_an_intended_mutant_in_the_examples() -> None:
    assert set(INTENDED) == set(BY_NAME)


@pytest.mark.parametrize("rule", sorted(INTENDED))
def test_a_fitting_contract_kills_the_rules_intended_mutant(
    rule: str, example_run: tuple[mm.MutationReport, Path]
) -> None:
    """End to end, in worker processes: the rule's intended mutant exists, and the contract written for that
    bug kills it (a case the unmutated kernel passes fails on the mutant)."""
    report, _ = example_run
    contract, change = INTENDED[rule]
    (unmutated,) = [c for c in report.contracts if c.contract_id == contract]
    assert unmutated.false_alarms == 0
    hits = [
        m
        for m in report.mutants
        if (m.mutant.rule, m.mutant.contract_id, m.mutant.change) == (rule, *INTENDED[rule])
    ]
    assert hits, f"no {rule} mutant {change!r} of {contract}"
    assert all(m.outcome == mm.KILLED and m.killed_by for m in hits), [(m.outcome, m.killed_by) for m in hits]


def test_the_example_contracts_kill_a_mutant_of_every_rule(
    example_run: tuple[mm.MutationReport, Path],
) -> None:
    """End to end, in worker processes: every rule plants a bug some hand-written contract catches."""
    report, root = example_run
    doc = report.to_json()
    assert doc["false_alarms"] == 0 and not report.sampled
    killed = {m.mutant.rule for m in report.mutants if m.outcome == mm.KILLED}
    assert killed == set(BY_NAME), set(BY_NAME) - killed
    by = {(m.mutant.contract_id, m.mutant.change): m for m in report.mutants}
    # an upcast on fp32 inputs changes nothing: equivalent, out of the kill rate
    assert by[("logsumexp-online", ".float() dropped")].outcome == mm.EQUIVALENT
    assert "overflow" in by[("softmax-stable", "- xf.amax(-1, keepdim=True) removed")].killed_by
    assert all(m.cases_run >= 1 and not m.cached for m in report.mutants)
    # the report renders, survivors and kills alike
    assert "kill rate" in render.text(doc) and render.markdown(doc).startswith("## kcgate mutate")

    again = _run(root)  # every mutant and the unmutated kernels' results come from the cache
    assert all(m.cached for m in again.mutants)
    assert [m.outcome for m in again.mutants] == [m.outcome for m in report.mutants]
    assert again.to_json()["false_alarms"] == 0


def test_budget_samples_mutants_by_seed(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", keyword="row-sum", max_mutants=3, seed=7)
    b = _run(tmp_path / "b", keyword="row-sum", max_mutants=3, seed=7)
    run = lambda r: sorted(m.mutant.key for m in r.mutants if m.outcome != mm.NOT_RUN)  # noqa: E731
    assert a.sampled and len(run(a)) == 3 and run(a) == run(b)
    assert a.to_json()["counts"]["not-run"] == len(a.mutants) - 3


def _project(tmp_path: Path, kernel: str, body: str, timeout: float = 30.0) -> Path:
    (tmp_path / "k.py").write_text("import torch\n\n" + textwrap.dedent(body))
    toml = tmp_path / "contracts.toml"
    toml.write_text(
        f'[project]\nname = "t"\npaths = ["."]\n\n[[contract]]\nid = "sm"\nclass = "C-PRC-01"\nop = "softmax"\n'
        f'kernel = "k:{kernel}"\nshapes = [[4, 64]]\nprotocol = {{ seeds = 1, timeout_s = {timeout} }}\n'
    )
    return toml


def test_a_hanging_mutant_costs_one_case(tmp_path: Path) -> None:
    toml = _project(
        tmp_path,
        "sm",
        """
        def sm(x):
            i = 0
            while i < 2:
                i += 1
            return torch.softmax(x, -1)
        """,
        timeout=3.0,
    )
    report = mut.mutate(
        [load_project(toml)],
        lambda p: make_executor("process", p, "cpu"),
        rules=(BY_NAME["accumulate-overwrites"],),
        advice=False,
    )
    (m,) = report.mutants
    assert m.outcome == mm.KILLED and "timed out" in m.killed_by and m.cases_run == 1


def test_an_unmutated_kernel_that_fails_judges_no_mutant(tmp_path: Path) -> None:
    toml = _project(tmp_path, "sm", "def sm(x):\n    return torch.softmax(x * 0.5, -1)\n")
    report = mut.mutate([load_project(toml)], lambda p: make_executor("process", p, "cpu"), advice=False)
    (c,) = report.contracts
    # the declared shape and its boundary shape, planned as `kcgate run` plans them
    assert c.false_alarms == c.cases == 2 and "passes none" in c.skipped
    assert {m.outcome for m in c.mutants} == {mm.NOT_RUN} and report.to_json()["kill_rate"] is None
    # the report says so first: the unmutated kernel's false alarms over the same seeds, then per contract
    for shown in (render.text(report.to_json()), render.markdown(report.to_json())):
        assert "unmutated kernels' false alarms: 2 case(s)" in shown
        assert "the unmutated kernel passes none of its 2 case" in shown


def test_installed_modules_are_not_mutated(tmp_path: Path) -> None:
    toml = tmp_path / "contracts.toml"
    toml.write_text(
        '[project]\nname = "t"\n\n[[contract]]\nid = "ln"\nclass = "C-PRC-01"\nop = "layernorm"\n'
        'kernel = "torch.nn.functional:layer_norm"\nshapes = [[4, 64]]\n'
    )
    target = mut.prepare(load_project(toml), load_project(toml).contracts[0], RULES, 0)
    assert target.mutants == [] and "outside the project" in target.report.skipped
    assert mut.prepare(load_project(toml), load_project(toml).contracts[0], RULES, 0, installed=True).mutants


@pytest.mark.slow
def test_an_equivalent_mutant_told_apart_by_a_remedy_is_a_survivor(tmp_path: Path) -> None:
    """At a width that is a multiple of the block, ``offs <= n`` masks nothing more than ``offs < n``: equal
    on the contract's inputs. A held-out shape with a tail block (the C-CMP-03 remedy) tells it apart. (The
    contract turns its boundary shapes off: with them, the width off the block kills the mutant outright.)"""
    (tmp_path / "kernels.py").write_text((EXAMPLE.parent / "kernels.py").read_text())
    toml = tmp_path / "contracts.toml"
    toml.write_text(
        '[project]\nname = "t"\npaths = ["."]\n\n[[contract]]\nid = "row-sum"\nclass = "C-PRC-01"\nop = "sum"\n'
        'kernel = "kernels:row_sum"\ndtypes = ["bfloat16"]\naccumulate = "float32"\nshapes = [[8, 256]]\n'
        "protocol = { seeds = 1, boundary = false }\n"
    )
    run = lambda probe: mut.mutate(  # noqa: E731
        [load_project(toml)],
        lambda p: make_executor("process", p, "cpu"),
        rules=(BY_NAME["mask-boundary"],),
        advise_all=probe,
    )
    (plain,) = run(False).mutants
    assert plain.outcome == mm.EQUIVALENT
    (probed,) = run(True).mutants
    assert probed.outcome == mm.SURVIVED and "told apart" in probed.advice_note
    assert any("C-CMP-03" in a for a in probed.advice)
