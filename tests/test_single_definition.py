"""One record per concept: a diff category is listed by its table only; statuses are one enum; a contract
key's allowed values are listed by its field row only.

A second hand-made list of the same names (a tuple, set, dict or list literal naming several of them) is
how the tables drifted apart before; everything else reads the one table.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from kcgate.contracts.fields import CONTRACT_FIELD
from kcgate.results.model import STATUSES, Status
from kcgate.results.records import CASE_COLUMNS, METRIC_COLUMNS
from kcgate.vocab.categories import (
    CATEGORIES,
    CATEGORY_TABLE,
    NOTICE,
    QUIET,
    SILENT,
    WAIVER_APPLIED,
    WAIVER_DECIDED,
)
from kcgate.vocab.causes import CAUSE_TABLE, KINDS
from kcgate.vocab.classes import CLASSES
from kcgate.vocab.device_kinds import DEVICE_KINDS, DEVICES
from tests.conftest import ROOT


def _literal_lists(names: set[str], at_least: int) -> set[str]:
    """Modules holding a collection literal that names at least ``at_least`` of ``names``."""
    found = set()
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or elts is None:
                continue
            hits = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in names}
            if len(hits) >= at_least:
                found.add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.slow
def test_diff_categories_are_listed_only_by_their_table() -> None:
    # vocab.categories.CATEGORY_TABLE holds one Category row per name; no module keeps a literal list of them
    assert _literal_lists(set(CATEGORIES), 4) == set()
    assert {c.name for c in CATEGORY_TABLE} == set(CATEGORIES) and len(CATEGORY_TABLE) == len(CATEGORIES)
    assert sorted(c.severity for c in CATEGORY_TABLE) == list(range(len(CATEGORIES)))


def test_case_statuses_are_the_status_enum() -> None:
    assert STATUSES == tuple(s.value for s in Status) and Status.PASS == "pass" and f"{Status.FAIL}" == "fail"


# The same words meaning something else: the gate's verdict, and the kernels `kcgate init`'s probe refused.
_OTHER_MEANINGS = {"kcgate/commands/_report_impl.py", "kcgate/adopt/probe.py", "kcgate/adopt/scaffold.py"}


def _status_words() -> dict[str, set[str]]:
    """Modules spelling a status as a string: any "pass"/"fail"/"refused", or "error" compared with a status
    (``x.status == "error"``) or listed with another status (a category or waiver kind "error" is not one)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            words = set()
            if isinstance(node, ast.Constant) and node.value in ("pass", "fail", "refused"):
                words.add(node.value)
            if isinstance(node, ast.Compare) and "status" in ast.unparse(node.left):
                words |= {
                    c.value for c in node.comparators if isinstance(c, ast.Constant) and c.value in STATUSES
                }
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finding" and node.args:
                words |= {node.args[0].value} if isinstance(node.args[0], ast.Constant) else set()
            if words:
                found.setdefault(str(path.relative_to(ROOT)), set()).update(words)
    return found


@pytest.mark.slow
def test_case_statuses_are_spelled_only_by_their_enum() -> None:
    # records.Status is the one spelling; code compares with Status.FAIL, keys tables by members, and reads
    # UNEVALUATED / SEVERITY from the enum's module
    assert set(_status_words()) - _OTHER_MEANINGS == {"kcgate/results/records.py"}
    assert _literal_lists(set(STATUSES), 2) - _OTHER_MEANINGS <= {"kcgate/results/records.py"}


def test_device_names_are_listed_only_by_their_table() -> None:
    # kcgate.vocab.device_kinds.DEVICE_KINDS holds one row per device kind; the registry and the loader read it
    from kcgate.devices import BACKENDS, VENDORS

    assert _literal_lists(set(DEVICES), 2) == set()
    assert set(BACKENDS) == set(DEVICES) and VENDORS == {k: DEVICE_KINDS[k].vendor for k in BACKENDS}
    assert all(cls.name == name for name, cls in BACKENDS.items())


def test_device_table_is_light() -> None:
    # the loader reads device names without importing the backends (about 43 ms of `validate`)
    code = "import sys, kcgate.contracts.load, kcgate.render.schema; print(sorted(m for m in sys.modules if 'devices' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_class_ids_are_listed_only_by_their_table() -> None:
    # a class's properties are fields of its classes.CLASSES row (e.g. ``backward``), not lists of ids
    from kcgate.vocab.classes import backward_classes

    assert _literal_lists(set(CLASSES), 4) == set()
    assert set(backward_classes()) == set(CLASSES) - {"C-PRC-03", "C-PRC-04", "C-EXC-02"}


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("distribution", CONTRACT_FIELD["distribution"].choices),
        ("oracle", CONTRACT_FIELD["oracle"].choices),
        ("tolerance method", CONTRACT_FIELD["tolerance"].field("method").choices),
        ("postcondition", CONTRACT_FIELD["postcondition"].choices),
        ("direction", CONTRACT_FIELD["direction"].choices),
        ("call", CONTRACT_FIELD["call"].choices),
    ],
)
@pytest.mark.slow
def test_contract_allowed_values_are_listed_only_in_the_field_table(
    name: str, values: tuple[str, ...]
) -> None:
    # kcgate.contracts.fields holds the one list; spec's constants, its checks and the schema read the row
    assert _literal_lists(set(values), len(values)) == {"kcgate/contracts/fields.py"}, name


def _column_definitions() -> dict[str, list[str]]:
    """Where each results column is defined: a call naming it first (``Column("seed", ...)``, ``_case(...)``)."""
    names = {c.name for c in (*CASE_COLUMNS, *METRIC_COLUMNS)}
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                fn = node.func.id if isinstance(node.func, ast.Name) else ""
                if node.args[0].value in names and fn in ("Column", "_case", "_metric"):
                    found.setdefault(node.args[0].value, []).append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.slow
def test_results_columns_are_defined_once_by_their_table() -> None:
    # records.CASE_COLUMNS / METRIC_COLUMNS: the row codec, the bulk reader, case_fields, the JSON Schema and
    # JUnit properties derive from them; no results module, schema or JUnit writer lists column names again
    names = [c.name for c in (*CASE_COLUMNS, *METRIC_COLUMNS)]
    assert _column_definitions() == {n: ["kcgate/results/records.py"] for n in names}
    writers = {
        "kcgate/render/schema.py",
        "kcgate/render/junit.py",
        "kcgate/render/junit_report.py",
        "kcgate/adopt/plugin.py",
        "kcgate/results/journal.py",
    }
    listed = _literal_lists({*names, "klass"}, 4)
    assert {m for m in listed if m.startswith("kcgate/results/") or m in writers} == set()


def _prefixed_column_names() -> dict[str, set[str]]:
    """Modules outside kcgate/results spelling a column under a prefix, as a JUnit property is named
    (``"kcgate.max_ulp"``, ``"metric.elements"``): a property list written by hand."""
    names = {c.name for c in (*CASE_COLUMNS, *METRIC_COLUMNS)}
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        module = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                prefix, _, name = node.value.rpartition(".")
                if prefix.isidentifier() and name in names and not module.startswith("kcgate/results/"):
                    found.setdefault(module, set()).add(node.value)
    return found


def test_junit_property_names_are_not_spelled_by_hand() -> None:
    # records.junit_properties lists a case's properties for run --junit, report --junit and the pytest
    # plugin; each writer names them from the column (``f"kcgate.{c.name}"``), never by a literal
    assert _prefixed_column_names() == {}


def test_failure_causes_are_listed_only_by_their_table() -> None:
    """The integrity causes, their messages and the kept causes were five hand lists; now one table."""
    names = {c.name for c in CAUSE_TABLE}
    # vocab/classes.py: each class's ``signatures`` column names the causes that class tests for
    assert _literal_lists(names, at_least=2) <= {"kcgate/vocab/causes.py", "kcgate/vocab/classes.py"}


def test_every_cause_has_a_kind_a_label_and_a_documented_anchor() -> None:
    page = (ROOT / "docs" / "signatures.md").read_text(encoding="utf-8")
    for c in CAUSE_TABLE:
        assert c.kind in KINDS and c.label, c.name
        assert f"`{c.name}`" in page, f"docs/signatures.md does not document {c.name}"
    integrity = [c for c in CAUSE_TABLE if c.kind == "integrity"]
    assert all(c.issue and not c.budget_meaningful for c in integrity)
    assert all(c.budget_meaningful for c in CAUSE_TABLE if c.kind != "integrity")


def _string_comparisons(names: set[str]) -> set[str]:
    """Modules comparing against a category by its literal name in a membership test of several."""
    found = set()
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
                for comp in node.comparators:
                    elts = getattr(comp, "elts", None) or []
                    if sum(isinstance(e, ast.Constant) and e.value in names for e in elts) >= 1:
                        found.add(str(path.relative_to(ROOT)))
    return found


def test_category_subsets_are_derived_from_the_table() -> None:
    """quiet, silent, notice, waiver-applied: read from the table's columns, never written out by hand."""
    assert _string_comparisons(set(CATEGORIES)) == set()
    assert SILENT == {"unchanged"} and QUIET == {"unchanged", "waived"}
    assert WAIVER_APPLIED == {"waived", "expired-waiver"}
    assert WAIVER_DECIDED == WAIVER_APPLIED | {"unexpected-pass"}
    assert NOTICE == {"fixed", "new", "waived"}


def _category_literals() -> set[str]:
    """Modules testing a case's category against a category name written out (``c.category == "budget-drift"``)
    rather than a subset of the table (``c.category in SHOWS_FACTOR``)."""
    found = set()
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and "category" in ast.unparse(node.left):
                if any(isinstance(c, ast.Constant) and c.value in CATEGORIES for c in node.comparators):
                    found.add(str(path.relative_to(ROOT)))
    return found


def test_categories_are_tested_by_the_tables_columns_not_by_name() -> None:
    # gate/diff.py assigns the categories (it spells each as it decides it); every reader tests a column
    assert _category_literals() == {"kcgate/gate/diff.py"}
    assert _category_collections() == set()


def _category_collections() -> set[str]:
    """Modules holding a tuple, list or set of category names of their own (pr_charts' MOVED was one): a
    subset of the categories is a column of vocab/categories.py. Hyphenated names only: "error", "new" and
    "fixed" are ordinary words elsewhere (a log level, a status)."""
    spelled = {c for c in CATEGORIES if "-" in c}
    found = set()
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        if path.name == "categories.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(
                isinstance(e, ast.Constant) and e.value in spelled for e in node.elts
            ):
                found.add(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_default_shapes_are_written_once() -> None:
    # each family's default shapes are its vocab.catalogue row's; the torch side (numerics/ops) reads them
    writers = set()
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "default_shapes":
                writers.add(str(path.relative_to(ROOT)))
    assert writers == {"kcgate/vocab/catalogue.py"}
