"""A contract's ``tolerance.baseline`` that edits the judge (issue 54, build item 1), run by ``kcgate run`` in real
workers. The baseline (``method = "relative"``: the kernel's error against the baseline's on the same inputs) is
user code like the reference, called on every trial. Each attacking baseline returns what the honest one returns (a softmax) and rewrites, in its own
process, kcgate's error function's code, the names it is bound to, or torch's, numpy's or builtins' functions
(tests/testing/kernels/reference_attacks.py). It runs in the reference's sandbox child
(kcgate.sandbox.reference, ``baseline``), so the project with them and the project with the honest baseline,
under the same contract ids and seed, get the same verdict and budget for every case, the later honest
contracts' included; with everything in the judge's process (KCGATE_SANDBOX=0) the in-place rewrite makes the
later honest 5%-off kernel a pass. A baseline whose module only ``[project] paths`` reaches is imported there
(the judge resolved it without the project's paths), and one that ends its process is its own case's error."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow

M = "tests.testing.kernels.reference_attacks"
ATTACKS = ("code_swap", "rebind", "patch_torch", "patch_numpy", "patch_builtins")
PROTOCOL = "protocol = { seeds = 1, trials = 2, boundary = false, timeout_s = 120 }"
# a baseline only the project's paths reach (a directory of the test's own, not on the worker's sys.path)
PATHS_MODULE = "kcgate_test_paths_baseline"


def _contract(cid: str, tolerance: str = "") -> str:
    return (
        f'\n[[contract]]\nid = "{cid}"\nclass = "C-PRC-01"\nkernel = "{M}:off"\nop = "softmax"\n'
        f'dtypes = ["float32"]\nshapes = [[4, 32]]\n{PROTOCOL}\n'
        + (f"tolerance = {{ {tolerance} }}\n" if tolerance else "")
    )


def _project(tmp: Path, attacked: bool, attacks: tuple[str, ...] = ATTACKS, crash: bool = True) -> Path:
    """The attacks' contracts (the honest baseline where not ``attacked``), then honest contracts after, in the
    same worker."""
    extra = tmp / "extra"
    extra.mkdir(exist_ok=True)
    (extra / f"{PATHS_MODULE}.py").write_text(f"from {M} import ref\n")
    text = f'[project]\npaths = ["{ROOT}", "{extra}"]\n'
    for a in attacks:
        base = f"{M}:ref_{a}" if attacked else f"{M}:ref"
        text += _contract(f"relative-{a}", f'method = "relative", baseline = "{base}"')
    if crash:  # before the later contracts: they run on in the same worker
        text += _contract("crash", f'method = "relative", baseline = "{M}:exits"')
    text += _contract("later-baseline", f'method = "relative", baseline = "{M}:ref"')
    text += _contract("later-paths", f'method = "relative", baseline = "{PATHS_MODULE}:ref"')
    text += _contract("later-family")
    path = tmp / ("attacked.toml" if attacked else "honest.toml")
    path.write_text(text)
    return path


def _run(project: Path, env: dict[str, str] | None = None) -> dict[str, tuple[str, float, str]]:
    out = project.with_suffix(".json")
    proc = kcgate(
        "run", "-c", str(project), "--results", str(out), "--seed", "1", "--shrink-s", "0", "-q", env=env
    )
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    return {c.case_id: (c.status, c.metrics.budget_used or 0.0, c.message) for c in load_run(out).cases}


def test_an_attacking_baseline_changes_no_verdict(tmp_path: Path) -> None:
    attacked = _run(_project(tmp_path, attacked=True))
    honest = _run(_project(tmp_path, attacked=False))
    assert attacked.keys() == honest.keys() and len(attacked) == len(ATTACKS) + 4
    crash = honest.pop("crash/float32/4x32/s0")  # a baseline that ends its process: its own case's error
    assert crash[0] == "error" and "the baseline's process exited with code 3" in crash[2], crash
    for cid, (status, budget, message) in honest.items():
        assert status == "fail" and budget > 10, (cid, honest[cid])  # the kernel is 5% off
        assert attacked[cid][:2] == (status, budget), (cid, attacked[cid], honest[cid])
        # each relative contract's verdict came from the baseline's error (an import error is no verdict)
        assert cid.startswith("later-family/") or "the baseline's" in message, (cid, message)


def test_without_the_sandbox_the_baseline_rewrite_passes(tmp_path: Path) -> None:
    """The attack is real: with the baseline in the judge's process (KCGATE_SANDBOX=0), kcgate's error function
    rewritten by it makes the later honest 5%-off kernel a pass (its worker is the attacked one's)."""
    project = _project(
        tmp_path, attacked=True, attacks=("code_swap",), crash=False
    )  # a crash: a fresh worker
    found = _run(project, env={"KCGATE_SANDBOX": "0"})
    assert found["later-family/float32/4x32/s0"][0] == "pass", found
