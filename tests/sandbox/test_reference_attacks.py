"""References and input generators that edit the judge (issue 54, build item 1), run by ``kcgate run`` in real
workers: each returns what the honest one returns and rewrites, in its own process, kcgate's error function's
code, the names it is bound to, or torch's, numpy's or builtins' functions. They run in a sandbox child of their
own (kcgate.sandbox.reference), so the project with them and the project with the honest functions, under the
same contract ids and seed, get the same verdict and budget for every case, the later honest contracts'
included; with everything in the judge's process (KCGATE_SANDBOX=0) the in-place rewrite is a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow

M = "tests.testing.kernels.reference_attacks"
ATTACKS = ("code_swap", "rebind", "patch_torch", "patch_numpy", "patch_builtins")
PROTOCOL = "protocol = { seeds = 1, trials = 2, boundary = false, timeout_s = 120 }"


def _contract(cid: str, body: str) -> str:
    return (
        f'\n[[contract]]\nid = "{cid}"\nclass = "C-PRC-01"\nkernel = "{M}:off"\n{body}'
        f'dtypes = ["float32"]\nshapes = [[4, 32]]\n{PROTOCOL}\n'
    )


def _project(tmp: Path, attacked: bool, attacks: tuple[str, ...] = ATTACKS) -> Path:
    """The attacks' contracts (the honest functions where not ``attacked``), then honest contracts after."""
    text = f'[project]\npaths = ["{ROOT}"]\n'
    for a in attacks:
        ref, gen = (f"ref_{a}", f"gen_{a}") if attacked else ("ref", "gen")
        text += _contract(f"ref-{a}", f'op = "softmax"\nreference = "{M}:{ref}"\n')
        text += _contract(f"gen-{a}", f'op = "custom"\nreference = "{M}:ref"\ninputs = "{M}:{gen}"\n')
    text += _contract("later-ref", f'op = "softmax"\nreference = "{M}:ref"\n')
    text += _contract("later-gen", f'op = "custom"\nreference = "{M}:ref"\ninputs = "{M}:gen"\n')
    text += _contract("later-family", 'op = "softmax"\n')
    path = tmp / ("attacked.toml" if attacked else "honest.toml")
    path.write_text(text)
    return path


def _run(project: Path, env: dict[str, str] | None = None) -> dict[str, tuple[str, float]]:
    out = project.with_suffix(".json")
    proc = kcgate(
        "run", "-c", str(project), "--results", str(out), "--seed", "1", "--shrink-s", "0", "-q", env=env
    )
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    return {c.case_id: (c.status, c.metrics.budget_used or 0.0) for c in load_run(out).cases}


def test_attacking_user_code_changes_no_verdict(tmp_path: Path) -> None:
    attacked = _run(_project(tmp_path, attacked=True))
    honest = _run(_project(tmp_path, attacked=False))
    assert attacked.keys() == honest.keys() and len(attacked) == 2 * len(ATTACKS) + 3
    for cid, (status, budget) in honest.items():
        assert status == "fail" and budget > 10, (cid, honest)  # the kernel is 5% off
        assert attacked[cid] == (status, budget), (cid, attacked[cid], honest[cid])


def test_without_the_sandbox_the_reference_rewrite_passes(tmp_path: Path) -> None:
    """The attack is real: with the reference in the judge's process (KCGATE_SANDBOX=0), kcgate's error
    function rewritten by the reference makes the 5%-off kernel a pass."""
    found = _run(_project(tmp_path, attacked=True, attacks=("code_swap",)), env={"KCGATE_SANDBOX": "0"})
    assert found["ref-code_swap/float32/4x32/s0"][0] == "pass", found
