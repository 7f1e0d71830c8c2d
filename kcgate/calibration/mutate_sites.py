"""Where ``kcgate mutate``'s mutants come from: the kernel's definition scoped in its module, every site a rule
applies to, and a mutant spliced into the source text only when it runs. Nothing is imported or run."""

from __future__ import annotations

import ast
import difflib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from kcgate.calibration.mutants import Mutant
from kcgate.vocab.mutation_rules import RULES, Rule, Where


def defines(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def scope(tree: ast.Module, name: str) -> list[ast.stmt]:
    """The top-level definitions the kernel ``name`` reaches in its module: itself, then every function,
    class or assignment it names (a Triton kernel its launcher calls, an autograd Function it applies)."""
    defs = {n: s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom)) for n in defines(s)}
    seen: list[ast.stmt] = []
    todo = [name]
    while todo:
        stmt = defs.get(todo.pop())
        if stmt is None or any(stmt is s for s in seen):
            continue
        seen.append(stmt)
        todo += [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in defs]
    return sorted(seen, key=lambda s: s.lineno)


def _rescales(fn: ast.AST) -> frozenset[str]:
    """Names a function assigns from ``exp(a - b)`` / ``exp2(a - b)``: an online softmax's rescale factors."""
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = n.value
            if isinstance(v, ast.Call) and getattr(v.func, "attr", getattr(v.func, "id", "")) in (
                "exp",
                "exp2",
            ):
                if v.args and isinstance(v.args[0], ast.BinOp) and isinstance(v.args[0].op, ast.Sub):
                    out.add(n.targets[0].id)
    return frozenset(out)


def walk(stmts: list[ast.stmt]) -> Iterator[tuple[ast.AST, Where]]:
    """Every node under ``stmts`` in source order, with where it sits."""

    def visit(node: ast.AST, where: Where) -> Iterator[tuple[ast.AST, Where]]:
        yield node, where
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = Where((*where.functions, node.name), rescales=_rescales(node))
        for name, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for child in children:
                if not isinstance(child, ast.AST):
                    continue
                test = isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)) and name == "test"
                arg = (
                    isinstance(node, ast.Call)
                    and name in ("args", "keywords")
                    or isinstance(node, ast.keyword)
                )
                yield from visit(
                    child,
                    replace(
                        where,
                        in_test=where.in_test or test,
                        call_arg=arg and not isinstance(child, ast.keyword),
                    ),
                )

    for stmt in stmts:
        yield from visit(stmt, Where())


# ---- generating mutants -----------------------------------------------------------------------------

# binding strength of an expression (Python's operator precedence, loosest first): a replacement needs
# parentheses only when it binds more loosely than the node it replaces
_BINOP = {ast.Add: 10, ast.Sub: 10, ast.Mult: 11, ast.Div: 11, ast.FloorDiv: 11, ast.Mod: 11, ast.MatMult: 11}
_BINOP.update({ast.BitOr: 6, ast.BitXor: 7, ast.BitAnd: 8, ast.LShift: 9, ast.RShift: 9, ast.Pow: 13})


def _binding(node: ast.AST) -> int:
    if isinstance(node, (ast.Lambda, ast.NamedExpr)):
        return 0
    if isinstance(node, ast.IfExp):
        return 1
    if isinstance(node, ast.BoolOp):
        return 2 if isinstance(node.op, ast.Or) else 3
    if isinstance(node, ast.UnaryOp):
        return 4 if isinstance(node.op, ast.Not) else 12
    if isinstance(node, ast.Compare):
        return 5
    if isinstance(node, ast.BinOp):
        return _BINOP.get(type(node.op), 0)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value < 0:
        return 12  # printed with a unary minus
    return 14  # atoms: names, attributes, calls, subscripts, constants, displays


def _offsets(text: bytes) -> list[int]:
    starts, at = [0], 0
    for line in text.splitlines(keepends=True):
        at += len(line)
        starts.append(at)
    return starts


def splice(source: str, node: ast.AST, new: ast.AST) -> str:
    """``source`` with ``node``'s text replaced by ``new`` (parenthesized when it binds more loosely than
    ``node``); AST offsets are UTF-8 byte offsets, so the splice is done on bytes."""
    raw = source.encode("utf-8")
    lines = _offsets(raw)
    start = lines[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
    end = lines[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    text = ast.unparse(ast.fix_missing_locations(new))
    if isinstance(new, ast.expr) and _binding(new) < _binding(node):
        text = f"({text})"
    return (raw[:start] + text.encode("utf-8") + raw[end:]).decode("utf-8")


_MAYBE_RELATIVE = re.compile(r"\bfrom[\s\\]*\.")  # `from .x`, `from ..`, `from \<newline> .x`


def absolute_imports(source: str, module: str, is_package: bool) -> str:
    """Relative imports made absolute: the mutant is imported under another name, outside its package.
    A module with no ``from .`` anywhere in its text (comments and strings included) has none, and is not
    parsed a second time: a module near the size cap took 4 s per parse on a 2-vCPU VM (#44)."""
    if not _MAYBE_RELATIVE.search(source):
        return source
    tree = ast.parse(source)
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level), key=lambda n: -n.lineno
    ):
        base = package[: len(package) - node.level + 1]
        absolute = ast.ImportFrom(
            module=".".join([*base, *([node.module] if node.module else [])]), names=node.names, level=0
        )
        source = splice(source, node, absolute)
    return source


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class Site:
    """One rule applied at one node, not yet spliced into the module: listing every site costs a walk of
    the tree; splicing, parsing and diffing are paid only for a mutant that runs (or is reported cached)."""

    contract_id: str
    rule: Rule
    node: ast.AST
    new: ast.AST
    change: str
    site: str
    line: int
    key: str

    def unrun(self) -> Mutant:
        """The mutant as a not-run row names it: no text, no diff."""
        r = self.rule
        return Mutant(self.contract_id, r.name, r.family, self.site, self.line, self.change, "", self.key)


def sites(
    source: str, name: str, contract_id: str = "", rules: tuple[Rule, ...] = RULES, key_salt: str = ""
) -> list[Site]:
    """Every rule application on the definition ``name`` (and what it reaches), one per rule, span and
    variant, without splicing any."""
    out, keys = [], set()
    for node, where in walk(scope(ast.parse(source), name)):
        for rule in rules:
            for k, (new, change) in enumerate(rule.transform(node, where)):
                line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
                # the span, not only its start: `a + b + c` holds two sums that start at one column
                site = f"L{line}C{col}-L{node.end_lineno}C{node.end_col_offset}#{k}"  # type: ignore[attr-defined]
                key = hashlib.sha256(f"{key_salt}|{contract_id}|{rule.name}|{site}".encode()).hexdigest()[:16]
                if key not in keys:  # the same rule at the same span twice would be the same mutant
                    keys.add(key)
                    out.append(Site(contract_id, rule, node, new, change, site, line, key))
    return out


def materialize(source: str, s: Site, label: str = "kernel.py", check: bool = True) -> Mutant | None:
    """The mutant's module and its diff; None when it does not parse (``check``) or changes nothing."""
    text = splice(source, s.node, s.new)
    if text == source:
        return None
    if check:
        try:
            ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    diff = "".join(
        difflib.unified_diff(
            source.splitlines(keepends=True), text.splitlines(keepends=True), f"a/{label}", f"b/{label}", n=1
        )
    )
    r = s.rule
    return Mutant(s.contract_id, r.name, r.family, s.site, s.line, s.change, diff, s.key, text)


def generate(
    source: str,
    name: str,
    contract_id: str = "",
    rules: tuple[Rule, ...] = RULES,
    key_salt: str = "",
    label: str = "kernel.py",
) -> list[Mutant]:
    """Every mutant of the definition ``name`` (and what it reaches) in ``source``: one rule, one site,
    one variant each; mutants whose text repeats an earlier one are left out. (Spliced all at once: for
    tests and small modules; ``mutate`` materializes only what it runs.)"""
    seen, out = {source}, []
    for s in sites(source, name, contract_id, rules, key_salt):
        m = materialize(source, s, label)
        if m is not None and m.source not in seen:
            seen.add(m.source)
            out.append(m)
    return out
