"""Shape classes and shape constraints: the grammar, held-out shapes across the whole class (extremes
always), and C-CMP-03 catching kernels that are right only near the declared shape."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcgate.contracts import shape_class as sc
from kcgate.contracts.load import load_project
from kcgate.errors import ContractsError

ROOT = Path(__file__).resolve().parents[2]
MNK = ("m", "k", "n")


# ---- grammar ------------------------------------------------------------------------------------------


def test_terms_parse_by_letter_and_index() -> None:
    cons = sc.parse({"m": "multiple_of(16)", "1": ["range(16, 8192)", "even"], "n": "ratio(k, 1/2)"}, MNK, 3)
    assert [t.kind for t in cons[0]] == ["multiple_of"]
    assert [t.kind for t in cons[1]] == ["range", "even"]
    assert cons[2][0].ref == 1 and cons[2][0].a == 0.5
    assert sc.violations((32, 64, 32), cons, MNK) == []
    assert sc.violations((33, 63, 31), cons, MNK) == [
        "m = 33: multiple_of(16)",
        "k = 63: even",
        "n = 31: ratio(k, 0.5)",
    ]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"m": "odd"}, "unknown constraint"),
        ({"q": "even"}, "unknown dimension 'q'"),
        ({"m": "range(8, 2)"}, "LO <= HI"),
        ({"m": "multiple_of(16, 2)"}, "takes 1 argument"),
        ({"m": "same_as(k)", "k": "same_as(m)"}, "cycle"),
        ({"m": "same_as(m)"}, "itself"),
        ({"5": "even"}, "out of range"),
        ({"m": 3}, "a string or a list"),
    ],
)
def test_bad_constraints_are_named(table: dict, words: str) -> None:
    with pytest.raises(sc.ShapeSyntaxError, match=words):
        sc.parse(table, MNK, 3)


# ---- drawing ------------------------------------------------------------------------------------------


def test_held_out_includes_the_class_extremes_and_respects_it() -> None:
    cons = sc.parse({"m": "multiple_of(16)", "k": "range(16, 8192)"}, MNK, 3)
    for seed in range(20):
        shapes = sc.held_out((64, 64, 64), cons, 6, seed)
        assert shapes[0] == (16, 16, 1)  # every dimension at its smallest
        assert max(s[1] for s in shapes) == 8192  # k's largest, however the cap squeezes the others
        assert max(s[0] for s in shapes) == 512  # m's default range: up to 8x the declared size
        for s in shapes:
            assert sc.violations(s, cons) == [] and math.prod(s) <= sc.MAX_ELEMENTS, s


def test_held_out_reaches_far_from_the_declared_shape_and_is_reproducible() -> None:
    a = sc.held_out((64, 64, 64), {}, 8, 5)
    assert a == sc.held_out((64, 64, 64), {}, 8, 5)
    assert a != sc.held_out((64, 64, 64), {}, 8, 6)
    drawn = {d for seed in range(30) for s in sc.held_out((64, 64, 64), {}, 8, seed)[4:] for d in s}
    assert any(d > 256 for d in drawn) and any(d < 8 for d in drawn)
    assert {127, 129, 255, 257} & drawn  # powers of two ± 1 (tile boundaries)


def test_relations_between_dims_hold() -> None:
    names = ("batch", "heads", "kv_heads", "head_dim")
    cons = sc.parse({"heads": "multiple_of(kv_heads)", "head_dim": "even and range(2, 256)"}, names, 4)
    for seed in range(20):
        for s in sc.held_out((2, 8, 2, 64), cons, 6, seed):
            assert s[1] % s[2] == 0 and s[3] % 2 == 0 and s[3] <= 256, s


def test_the_cap_keeps_extremes_affordable() -> None:
    cons = sc.parse({"k": "range(1, 1000000)"}, MNK, 3)
    shapes = sc.held_out((256, 256, 256), cons, 4, 1)
    assert all(math.prod(s) <= max(sc.MAX_ELEMENTS, 256**3) for s in shapes)
    assert max(s[1] for s in shapes) == 1000000  # the extreme survives; the other dims shrink


# ---- contracts ----------------------------------------------------------------------------------------


def _contract(tmp_path: Path, extra: str, klass: str = "C-CMP-03", shapes: str = "[[64, 64, 64]]") -> Path:
    (tmp_path / "k.py").write_text("def f(a, b):\n    return a @ b\n")
    p = tmp_path / "contracts.toml"
    p.write_text(
        f'[project]\npaths = ["."]\n\n[[contract]]\nid = "c"\nclass = "{klass}"\nop = "matmul"\n'
        f'kernel = "k:f"\nshapes = {shapes}\n{extra}\n'
    )
    return p


def test_shape_class_loads(tmp_path: Path) -> None:
    p = _contract(
        tmp_path,
        'shape_class = { dims = { m = "multiple_of(16)", k = "range(16, 8192)" }, max_elements = 1000000 }',
    )
    c = load_project(p).contracts[0]
    assert c.shape_class == ((0, "multiple_of(16)"), (1, "range(16, 8192)")) and c.max_elements == 1000000


@pytest.mark.parametrize(
    ("extra", "klass", "words"),
    [
        ('shape_class = { dims = { m = "multiple_of(48)" } }', "C-CMP-03", "shape [64, 64, 64] is outside"),
        ('shape_constraints = { 2 = "pow2", m = "wat" }', "C-CMP-03", "unknown constraint 'wat'"),
        ('shape_class = { dims = { m = "even" } }', "C-PRC-01", "C-CMP-03 only"),
        ('shape_class = { dim = { m = "even" } }', "C-CMP-03", "dim"),
        ('shape_constraints = { n = "multiple_of(3)" }', "C-PRC-01", "n = 64: multiple_of(3)"),
    ],
)
def test_bad_shape_keys_name_file_line_and_fix(tmp_path: Path, extra: str, klass: str, words: str) -> None:
    with pytest.raises(ContractsError) as info:
        load_project(_contract(tmp_path, extra, klass))
    text = "\n".join(f"{p.file}:{p.line} {p.where} {p.message} fix: {p.fix}" for p in info.value.problems)
    assert words in text and ":10 " in text or words in text and ":9 " in text, text
    assert all(p.fix for p in info.value.problems)


# ---- C-CMP-03 in process --------------------------------------------------------------------------


def _run(kernel, shape, seed: int, *, op_name: str = "matmul", contract_kw=None, op=None, held_out=None):  # type: ignore[no-untyped-def]
    from kcgate.contracts.records import Contract, Protocol
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.trial import CaseContext
    from kcgate.numerics.ops import OPS
    from kcgate.plan import Case

    contract = Contract(
        id="t",
        klass="C-CMP-03",
        kernel="x:y",
        op=op_name,
        protocol=Protocol(seeds=1, trials=2),
        **(contract_kw or {}),
    )
    case = Case("t", "t", "C-CMP-03", op_name, "float32", tuple(shape), 0, seed, held_out=held_out)
    return CHECKS["C-CMP-03"](CaseContext(contract=contract, case=case, kernel=kernel, op=op or OPS[op_name]))


def _benchmark_only(a, b):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "examples" / "incidents" / "sakana-reward-hacking"))
    import sakana

    return sakana.benchmark_only(a, b)


@pytest.mark.slow
def test_sakana_benchmark_only_fails_on_every_seed() -> None:
    for seed in range(24):
        f = _run(_benchmark_only, (64, 128, 64), seed)
        assert f.status == "fail" and f.signature is not None, (seed, f)
        assert f.signature.cause == "shape-overfitting" and "64x1024x64" in f.signature.summary, (seed, f)


def test_a_kernel_raising_beyond_the_neighbourhood_fails() -> None:
    import torch

    def small_m_only(a, b):  # type: ignore[no-untyped-def]
        if a.shape[0] > 256:
            raise ValueError("M > 256 not supported")
        return torch.matmul(a, b)

    for seed in range(5):
        f = _run(small_m_only, (64, 64, 64), seed)
        assert f.status == "fail" and f.signature is not None and f.signature.cause == "shape-overfitting"
        assert "512x64x64" in f.signature.summary and "M > 256" in f.signature.summary, f
    assert _run(torch.matmul, (64, 64, 64), 0).status == "pass"


def test_custom_op_constraints_are_respected_and_the_failing_shape_named() -> None:
    import torch

    from kcgate.numerics.ops.custom import custom_op

    def inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
        assert shape[-1] % 2 == 0, f"head dim {shape[-1]} must be even"
        return (torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype),)

    def rotate(x):  # type: ignore[no-untyped-def]
        a, b = x.chunk(2, -1)
        return torch.cat((-b, a), -1)

    op = custom_op(inputs, rotate)
    kw = {
        "shape_constraints": ((2, "even"),),
        "tolerance": __import__("kcgate.contracts.records").contracts.records.Tolerance(
            method="abs-rel", atol=1e-6
        ),
    }
    for seed in range(3):
        f = _run(rotate, (2, 4, 64), seed, op_name="custom", op=op, contract_kw=kw, held_out=6)
        assert f.status == "pass", (seed, f)

    def small_only(x):  # type: ignore[no-untyped-def]
        return rotate(x) if x.shape[-1] <= 128 else x

    f = _run(small_only, (2, 4, 64), 0, op_name="custom", op=op, contract_kw=kw)
    assert f.status == "fail" and f.signature is not None and "x512" in f.signature.summary, f


@pytest.mark.slow
def test_held_out_flag_reaches_the_check(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "kcgate",
        "run",
        "--contracts",
        str(ROOT / "examples/incidents/sakana-reward-hacking/contracts.toml"),
        "-k",
        "sakana-benchmark-only",
        "--held-out",
        "0",
        "--seed",
        "3",
        "--results",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "64x1024x64" in proc.stdout  # the extremes are drawn even with no extra held-out shapes
    bad = subprocess.run(
        [*cmd[:6], "--held-out=-1", "--results", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "--held-out" in bad.stderr


def test_every_family_constraint_parses_and_its_default_shapes_satisfy_it() -> None:
    from kcgate.numerics.ops import OPS
    from kcgate.vocab.catalogue import dims_of

    for name, op in OPS.items():
        names = dims_of(name)
        cons = sc.parse({str(i): t for i, t in op.shape_constraints.items()}, names, None)
        for shape in op.default_shapes:
            assert sc.violations(shape, cons, names) == [], (name, shape)
            for s in sc.held_out(shape, cons, 4, 0):
                assert sc.violations(s, cons, names) == [], (name, s)


def test_attention_counts_its_length_twice_in_the_cap() -> None:
    from kcgate.engine.checks.c_cmp_03 import cost

    c = cost("sdpa")
    assert c((2, 4, 1024, 64)) == 2 * 4 * 1024 * 64 * 64
    for s in sc.held_out((2, 4, 128, 64), {}, 6, 3, cost=c):
        assert c(s) <= sc.MAX_ELEMENTS, s
    assert max(s[2] for s in sc.held_out((2, 4, 128, 64), {}, 0, 3, cost=c)) == 1024  # the extreme survives
    # a fixed query length (params.q_len) counts where it exceeds the keys': the shape that drew 1.8 GB tensors
    q = cost("attention", 131)
    assert q((256, 64, 2, 1, 106)) > sc.MAX_ELEMENTS >= cost("attention")((256, 64, 2, 1, 106))
    for seed in range(20):
        for s in sc.held_out((1, 6, 2, 113, 61), {}, 6, seed, cost=q):
            assert s[0] * s[1] * max(131, s[3]) * s[4] <= sc.MAX_ELEMENTS, s  # q's elements within the cap


def test_custom_ops_relate_dims_by_index() -> None:
    cons = sc.parse({"1": "multiple_of(#2)", "0": "ratio(2, 1/2) and even"}, None, 3)
    assert cons[1][0].ref == 2 and cons[0][0].ref == 2
    shapes = sc.held_out((8, 32, 16), cons, 8, 1)
    assert len(shapes) >= 8
    for s in shapes:
        assert s[1] % s[2] == 0 and 2 * s[0] == s[2] and s[0] % 2 == 0, s


# ---- the grammar under fuzzing (issue 35) -------------------------------------------------------------

_NAMES = [*sc.TERMS, "odd", "", "ratio ", "EVEN", "multiple_of_"]
_ARGS = [
    "",
    "0",
    "1",
    "2",
    "16",
    "1/0",
    "0/0",
    "1/2",
    "1.5",
    "1.5/0",
    "k",
    "m",
    "n",
    "#2",
    "#9",
    "-1",
    "1e3",
    "9" * 25,
    "1" * 5000,
    "\u0663",
    "(",
    ")",
    ",",
    " ",
    "k, 1/0",
]


@st.composite
def _constraint(draw: st.DrawFn) -> str:
    """A constraint near the grammar (a known or unknown name, 0-3 arguments from awkward tokens), or any
    text at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=30))
    name = draw(st.sampled_from(_NAMES))
    args = draw(st.lists(st.one_of(st.sampled_from(_ARGS), st.text(max_size=6)), max_size=3))
    if not args and draw(st.booleans()):
        return name
    return f"{name}({', '.join(args)})"


_TABLES = st.dictionaries(
    st.one_of(
        st.sampled_from(["m", "k", "n", "0", "1", "2", "3", "#1", "x", "99999999999999999999999"]),
        st.text(max_size=4),
    ),
    st.one_of(_constraint(), st.lists(_constraint(), max_size=3), st.integers(), st.none()),
    max_size=3,
)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    table=_TABLES, shape=st.lists(st.integers(0, 1 << 45), min_size=3, max_size=3), by_letter=st.booleans()
)
def test_only_the_grammars_syntax_error_escapes(table: dict, shape: list[int], by_letter: bool) -> None:  # type: ignore[type-arg]
    """Any table of constraints either parses or raises ShapeSyntaxError (validate's exit 2 with the line),
    never KeyError or ZeroDivisionError (issue 35: ``even(2)``, ``pow2(1)``, ``ratio(k, 1/0)`` exited 4).
    What parses is usable: checked against a shape, and its text parses again (validate re-reads it)."""
    names = MNK if by_letter else None
    try:
        cons = sc.parse(table, names, 3 if by_letter else None)
    except sc.ShapeSyntaxError:
        return
    sc.violations(shape, cons, names)
    again = {str(i): " and ".join(t.text(names) for t in terms) for i, terms in cons.items()}
    assert {
        i: [t.kind for t in ts] for i, ts in sc.parse(again, names, 3 if by_letter else None).items()
    } == {i: [t.kind for t in ts] for i, ts in cons.items()}


@pytest.mark.parametrize(
    "text",
    [
        "even(2)",
        "pow2(1)",
        "ratio(k, 1/0)",
        "ratio(k, 0/0)",
        "range(1, " + "9" * 5000 + ")",
        "multiple_of(1e3)",
    ],
)
def test_issue_35_grammar_crashes_are_syntax_errors(text: str) -> None:
    with pytest.raises(sc.ShapeSyntaxError):
        sc.parse({"n": text}, MNK, 3)


@pytest.mark.parametrize(
    "text", ["ratio(k, 1/2)", "range(1, 100000000)", "ratio(k, 1000000)", "ratio(k, 1/3)"]
)
def test_issue_35_validate_reads_back_what_it_wrote(tmp_path: Path, text: str) -> None:
    """validate re-parses each constraint's text to check the declared shapes: a dimension named by letter
    and a number ``:g`` wrote as ``1e+08`` broke that read (exit 4)."""
    path = tmp_path / "c.toml"
    path.write_text(
        f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "mm"\nclass = "C-ORD-02"\n'
        'kernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\ndtypes = ["float32"]\n'
        f'shapes = [[64, 64, 32]]\nshape_constraints = {{ n = "{text}" }}\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kcgate", "validate", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode in (0, 2) and "internal error" not in proc.stderr, proc.stderr


# ---- relations the declared shapes show (issue 32, Build item 4) ----------------------------------------


def test_implied_keeps_equal_and_dividing_related_dims() -> None:
    implied = sc.implied
    assert implied([(2, 4, 4, 128, 32)], [(1, 2)], set()) == {1: (sc.Term("same_as", ref=2),)}
    assert implied([(2, 8, 2, 128, 32), (1, 4, 1, 64, 32)], [(1, 2)], set()) == {
        1: (sc.Term("multiple_of", ref=2),)
    }
    assert implied([(2, 4, 4, 128, 32), (2, 4, 2, 128, 32)], [(1, 2)], set()) == {
        1: (sc.Term("multiple_of", ref=2),)
    }
    assert implied([(2, 4, 4, 128, 32)], [(1, 2)], {2}) == {}  # the contract says: left to it


def _mha(q, k, v, **kw):  # type: ignore[no-untyped-def]
    """Multi-head attention that never claimed grouped-query heads: k and v must have q's heads."""
    import torch

    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def _cmp03_ctx(shape_class: tuple = (), seed: int = 0):  # type: ignore[no-untyped-def,type-arg]
    from kcgate.contracts.records import Contract
    from kcgate.engine.case import op_for
    from kcgate.engine.trial import CaseContext
    from kcgate.plan import Case

    shape = (2, 4, 4, 64, 32)
    c = Contract(
        id="t", klass="C-CMP-03", kernel="x:y", op="attention", shapes=(shape,), shape_class=shape_class
    )
    case = Case("t", "t", "C-CMP-03", "attention", "float32", shape, seed, 1000 + seed)
    return CaseContext(contract=c, case=case, kernel=_mha, op=op_for(c, ()))


@pytest.mark.parametrize("seed", range(3))
def test_mha_under_c_cmp_03_with_default_shape_classes_passes(seed: int) -> None:
    """Declared H = H_kv: held-out shapes keep H = H_kv (they drew 2x512x4x16x32, a GQA shape, and failed a
    kernel that never claimed GQA as shape-overfitting)."""
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.checks.c_cmp_03 import held_out_shapes

    ctx = _cmp03_ctx(seed=seed)
    shapes = held_out_shapes(ctx)
    assert len(shapes) > 5 and all(s[1] == s[2] for s in shapes)
    f = CHECKS["C-CMP-03"](ctx)
    assert f.status.value == "pass", f.message


def test_a_shape_class_naming_kv_heads_varies_it() -> None:
    from kcgate.engine.checks.c_cmp_03 import held_out_shapes

    shapes = held_out_shapes(_cmp03_ctx(shape_class=((2, "range(1, 4)"),)))
    assert any(s[1] != s[2] for s in shapes)
