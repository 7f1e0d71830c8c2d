"""The README's family call signatures are the families' real calls (issue 56: the README said geglu is
``kernel(a, b)`` while the family passes ``approximate=`` too): every "`<family>` ... as `kernel(...)`" names
the family's inputs in order and every keyword argument the family passes under any of its params' choices."""

from __future__ import annotations

import itertools
import re

import pytest

from kcgate.numerics.ops import OPS
from kcgate.vocab.catalogue import params_of
from tests.conftest import ROOT

# the README's words for the families' input names
ALIASES = {"indices": "index", "weight": "w"}
CALL = re.compile(r"`kernel\(([^`]*)\)`")


NAMED = re.compile(r"`([a-z_]+)`(?:\s+and\s+`([a-z_]+)`)?(?:\s+`\([^`]*\)`)?\s*$")


def _readme_calls() -> dict[str, list[str]]:
    """family -> the argument lists the README gives it: each "`family` [`(shape)`] as `kernel(...)`", and
    "`swiglu` and `geglu` ... as `kernel(a, b)`" for both."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("`matmul` `(M,K,N)`") :]
    section = section[: section.index("A custom op sets")]
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"\s+as\s+" + CALL.pattern, section):
        named = NAMED.search(section[: m.start()])
        for n in named.groups() if named else ():
            if n in OPS:
                out.setdefault(n, []).append(m.group(1))
    return out


def _keywords(op: str) -> set[str]:
    """Every keyword argument the family passes a kernel, under every combination of its params' choices."""
    fam = OPS[op]
    specs = {k: s.choices for k, s in params_of(op).items() if s.choices}
    found: set[str] = set()
    for combo in itertools.product(*specs.values()) if specs else [()]:
        configured = fam.configure(dict(zip(specs, combo))) if fam.configure else fam
        if configured.kwargs:
            shape = next(iter(configured.default_shapes), (2, 4, 2, 8, 16))
            found |= set(configured.kwargs(tuple(shape)))
    return found


CALLS = _readme_calls()


def test_the_readme_gives_a_call_for_the_families_with_several_inputs() -> None:
    assert {"linear", "layernorm", "rmsnorm", "embedding", "attention", "rope", "swiglu", "geglu"} <= set(
        CALLS
    )


@pytest.mark.parametrize("op", sorted(CALLS))
def test_the_readme_call_names_the_familys_inputs_and_keywords(op: str) -> None:
    calls = [c for c in CALLS[op] if c]
    assert calls, f"README gives {op} no kernel(...) call"
    keywords = _keywords(op)
    for call in calls:
        args = [a.strip() for a in call.split(",") if a.strip() and a.strip() != "..."]
        positional = [ALIASES.get(a, a) for a in args if "=" not in a]
        named = {a.split("=")[0] for a in args if "=" in a}
        assert tuple(positional) == OPS[op].input_names, (op, call, OPS[op].input_names)
        # a call that lists keywords lists them all ("..." stands for the rest of the family's own)
        if named or keywords:
            assert keywords <= named or "..." in call, (op, call, sorted(keywords))
