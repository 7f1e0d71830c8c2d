"""A PR's own change, end to end (#44, the second attack suite): the default branch's project is run, the
PR's checkout (its contracts.toml, its kernels) is run, and ``kcgate report`` decides from the default
branch's checkout, as the two-workflow setup does. Every contract here is one attack: the PR breaks the
kernel (its output 1.5x) and changes one thing that could move the case out of comparison or the gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow

_OPS = """import torch


def good(x):
    return torch.softmax(x, -1)


def broken(x):
    return torch.softmax(x, -1) * 1.5


def other_good(x):
    return torch.softmax(x.double(), -1).to(x.dtype)
"""

# one contract per attack; {k} is the kernel, {extra} the PR's change
_CONTRACT = """
[[contract]]
id = "{id}"
class = "{cls}"
kernel = "kern.ops:{k}"
op = "softmax"
dtypes = {dtypes}
shapes = {shapes}
protocol = {{ seeds = {seeds}, trials = 1, boundary = false }}
{extra}
"""

_BASE = {  # id -> the base contract's fields
    "env-line": {},
    "old-name": {},
    "reshaped": {},
    "redtyped": {},
    "reseeded": {},
    "reclassed": {},
    "swapped": {},
    "removed": {},
    "devices": {},
    "waived-in-pr": {},
    "declines": {},
}
_PR = {  # id in the PR -> (base id, the PR's fields)
    "env-line": ("env-line", {"extra": 'env = { ANY = "1" }'}),
    "new-name": ("old-name", {}),
    "reshaped": ("reshaped", {"shapes": "[[4, 32]]"}),
    "redtyped": ("redtyped", {"dtypes": '["float64"]'}),
    "reseeded": ("reseeded", {"seeds": "2"}),
    "reclassed": ("reclassed", {"cls": "C-PRC-02"}),
    "swapped": ("swapped", {"k": "other_good_then_broken"}),
    "devices": ("devices", {"extra": 'devices = ["cuda"]'}),
    "declines": ("declines", {"k": "declines"}),
    "waived-in-pr": (
        "waived-in-pr",
        {"extra": '[[contract.waiver]]\nrunner = "*"\nuntil = 2099-01-01\nreason = "the PR says so"'},
    ),
}
_PR_POLICY = '[policy]\nblock_on = []\nacknowledge_removed = ["removed"]\n'


def _contract(cid: str, fields: dict[str, str], kernel: str) -> str:
    defaults = {"cls": "C-PRC-01", "k": kernel, "dtypes": '["float32"]', "shapes": "[[8, 64]]", "seeds": "1"}
    return _CONTRACT.format(id=cid, **{**defaults, "extra": "", **fields})


def _project(root: Path, contracts: str, ops: str) -> Path:
    (root / "kern").mkdir(parents=True)
    (root / "kern" / "__init__.py").write_text("")
    (root / "kern" / "ops.py").write_text(ops)
    (root / "contracts.toml").write_text('[project]\npaths = ["."]\n' + contracts)
    return root


def _run(root: Path, *extra: str) -> None:
    proc = kcgate(
        "run", "-c", "contracts.toml", "--results", "results/cpu.json", "--runner", "cpu", "--seed", "3",
        "--shrink-s", "0", "-q", *extra, cwd=root, env={"PYTHONPATH": f"{root}:{ROOT}"},
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The default branch's checkout with its baseline, and the PR's results."""
    tmp = tmp_path_factory.mktemp("sidestep")
    base = _project(tmp / "base", "".join(_contract(c, f, "good") for c, f in _BASE.items()), _OPS)
    _run(base)
    (base / "baselines").mkdir()
    shutil.copy(base / "results" / "cpu.json", base / "baselines" / "cpu.json")
    pr_ops = _OPS + "\n\ndef other_good_then_broken(x):\n    return torch.softmax(x, -1) * 1.5\n"
    pr_ops += '\n\ndef declines(x):\n    raise NotImplementedError("float32 is not supported")\n'

    pr_text = _PR_POLICY + "".join(_contract(c, f, "broken") for c, (_, f) in _PR.items())
    pr = _project(tmp / "pr", pr_text, pr_ops)
    _run(pr)
    return base, pr


def _report(base: Path, results: Path, *extra: str) -> tuple[int, dict[str, str], str]:
    out = base / "verdict.json"
    proc = kcgate(
        "report", str(results), "--baseline", "baselines", "-c", "contracts.toml", "--format", "json",
        "--output", str(out), *extra, cwd=base,
    )  # fmt: skip
    assert "internal error" not in proc.stderr, proc.stderr
    doc = json.loads(out.read_text())
    cats: dict[str, str] = {}
    for runner in doc["runners"]:
        for change in runner["changes"]:
            cats.setdefault(change["contract_id"], change["category"])
    return proc.returncode, cats, proc.stderr


@pytest.mark.parametrize(
    ("contract", "category"),
    [
        ("env-line", "new-violation"),  # #1: incomparable by its env, still a violation
        ("new-name", "new-violation"),  # renamed: the new id is a violation ...
        ("old-name", "removed"),  # ... and the old one's cases are removed, which blocks
        ("reshaped", "new-violation"),
        ("redtyped", "new-violation"),
        ("reseeded", "new-violation"),
        ("reclassed", "new-violation"),  # the same case ids under another class: judged as they are now
        ("swapped", "new-violation"),  # another kernel function under the same id
        ("removed", "removed"),  # the PR's acknowledge_removed is not the default branch's
        (
            "devices",
            "removed",
        ),  # devices = ["cuda"]: not run on the CPU runner, so removed there, which blocks
        ("waived-in-pr", "new-violation"),  # a waiver in the PR's contracts.toml is not read
        ("declines", "error"),  # the kernel now refuses the dtype it passed on: an error blocks
    ],
)
def test_no_change_in_the_pr_moves_its_failure_out_of_the_gate(
    runs: tuple[Path, Path], contract: str, category: str
) -> None:
    base, pr = runs
    code, cats, stderr = _report(base, pr / "results")
    assert code == 1, stderr
    assert cats[contract] == category, cats


def test_a_pass_file_for_the_same_runner_beside_the_prs_results_does_not_replace_them(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """The PR's artifact holds its real results and a copy of the baseline (all passes) for the same runner:
    a report must not pick the passing one."""
    base, pr = runs
    art = tmp_path / "artifacts"
    art.mkdir()
    shutil.copy(pr / "results" / "cpu.json", art / "cpu.json")
    shutil.copy(base / "baselines" / "cpu.json", art / "cpu-2.json")
    proc = kcgate("report", str(art), "--baseline", "baselines", "-c", "contracts.toml", cwd=base)
    assert proc.returncode in (1, 3), proc.stdout + proc.stderr
    if proc.returncode == 3:
        assert "cpu" in proc.stderr and "internal error" not in proc.stderr


def test_a_duplicate_contract_id_in_the_pr_is_exit_2(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Two contracts with one id would file two kernels' cases under one name: refused before running."""
    _, pr = runs
    text = (pr / "contracts.toml").read_text() + _contract("reshaped", {}, "good")
    (tmp_path / "contracts.toml").write_text(text.replace('paths = ["."]', f'paths = ["{pr}"]'))
    proc = kcgate("validate", "-c", str(tmp_path / "contracts.toml"), cwd=tmp_path)
    assert proc.returncode == 2 and "reshaped" in proc.stderr, proc.stdout + proc.stderr


def test_a_contract_that_selects_no_dtype_or_shape_is_exit_2(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """D15: ``devices = []`` too (it meant every device, where ``dtypes = []`` is refused)."""
    _, pr = runs
    for fields in ({"dtypes": "[]"}, {"shapes": "[]"}, {"extra": "devices = []"}):
        text = '[project]\npaths = ["."]\n' + _contract("empty", fields, "good")
        (tmp_path / "contracts.toml").write_text(text.replace('paths = ["."]', f'paths = ["{pr}"]'))
        proc = kcgate("validate", "-c", str(tmp_path / "contracts.toml"), cwd=tmp_path)
        assert proc.returncode == 2 and "empty" in proc.stderr, (fields, proc.stdout + proc.stderr)
        assert "selects no" in proc.stderr and "Traceback" not in proc.stderr


def test_the_prs_own_policy_is_what_a_one_workflow_setup_would_read(runs: tuple[Path, Path]) -> None:
    """The documented limit (docs/security.md): a report reading the PR's contracts.toml applies the PR's
    policy. The two-workflow setup reads the default branch's; here the PR's empties block_on."""
    base, pr = runs
    proc = kcgate("report", "results", "--baseline", str(base / "baselines"), "-c", "contracts.toml", cwd=pr)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_run_of_a_subset_of_the_cases_blocks_on_the_rest(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """The PR's run workflow passes ``-k`` (or one shard): the cases it left out are not silently passing."""
    base, pr = runs
    sub = tmp_path / "pr"
    shutil.copytree(pr, sub, ignore=shutil.ignore_patterns("results"))
    _run(sub, "-k", "reseeded")
    code, cats, stderr = _report(base, sub / "results")
    assert code == 1, stderr
    assert cats["env-line"] == "removed" and cats["reseeded"] == "new-violation", cats
