"""One ``--format`` on every command that reports, shell completion with the enumerated options' choices,
and the deprecated spellings that still work. ``validate --format github`` is the one that puts a contracts
error on the pull request: one annotation per problem, at its line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from tests.conftest import DATA, ROOT, kcgate
from tests.testing.report_samples import write_results_pair

BAD = DATA / "bad_contracts"
ANNOTATION = re.compile(r"^::error file=([^,]+),line=(\d+),title=kcgate validate::(.*)$")
CONSOLE_PROBLEM = re.compile(r"^(\S+\.toml):(\d+): ")


def test_validate_github_prints_one_annotation_per_problem_at_its_line() -> None:
    res = kcgate("validate", "--format", "github", "30_many_errors_at_once.toml", cwd=BAD)
    assert res.returncode == 2, res.stderr
    found = [ANNOTATION.match(line) for line in res.stdout.splitlines()]
    assert all(found) and len(found) == 3
    assert [(m.group(1), int(m.group(2))) for m in found if m] == [
        ("30_many_errors_at_once.toml", 7),  # class = "C-PRC-1"
        ("30_many_errors_at_once.toml", 10),  # dtypes = ["float33"]
        ("30_many_errors_at_once.toml", 11),  # tolerance = { lambda = 0 }
    ]
    text = (BAD / "30_many_errors_at_once.toml").read_text().splitlines()
    assert "C-PRC-1" in text[6] and "float33" in text[9] and "lambda = 0" in text[10]
    assert "unknown class 'C-PRC-1' (fix: did you mean 'C-PRC-01'?)" in res.stdout


@pytest.mark.parametrize("name", sorted(p.name for p in BAD.glob("*.toml")))
def test_validate_github_and_console_name_the_same_problems(name: str) -> None:
    """Every broken file of the corpus: the annotations are the console's problems, file and line alike."""
    console = kcgate("validate", name, cwd=BAD)
    github = kcgate("validate", "--format", "github", name, cwd=BAD)
    assert console.returncode == github.returncode != 0
    if console.returncode != 2:  # not a contracts problem (e.g. exit 3): the usual error message
        return
    located = [m.groups() for m in map(CONSOLE_PROBLEM.match, console.stderr.splitlines()) if m]
    annotated = [m.groups()[:2] for m in map(ANNOTATION.match, github.stdout.splitlines()) if m]
    assert annotated and len(annotated) == len(github.stdout.splitlines())
    assert [a for a in annotated if a[1] != "0"] == located or not located


def test_validate_json_and_a_valid_file(tmp_path: Path) -> None:
    res = kcgate("validate", "--format", "json", "02_unknown_class.toml", cwd=BAD)
    doc = json.loads(res.stdout)
    assert res.returncode == 2 and doc["kind"] == "kcgate-validate" and doc["ok"] is False
    assert doc["problems"] == [
        {
            "file": "02_unknown_class.toml",
            "line": 7,
            "where": "contract 'a'.class",
            "message": "unknown class 'C-PRC-1'",
            "fix": "did you mean 'C-PRC-01'?",
        }
    ]
    ok = kcgate("validate", "--format", "github", "contracts.toml", cwd=ROOT)
    assert ok.returncode == 0 and "::error" not in ok.stdout and "contracts.toml: OK:" in ok.stdout
    ok = kcgate("validate", "--format", "json", "contracts.toml", cwd=ROOT)
    assert json.loads(ok.stdout)["ok"] is True and json.loads(ok.stdout)["contracts"] > 0


def test_an_unknown_format_is_bad_usage() -> None:
    res = kcgate("validate", "--format", "xml", "contracts.toml", cwd=ROOT)
    assert res.returncode == 3 and "--format 'xml' is not one of: console, json, github" in res.stderr


def test_diff_github_annotates_the_contracts_file(tmp_path: Path) -> None:
    base, current = write_results_pair(tmp_path)
    res = kcgate("diff", str(base), str(current), "--format", "github", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert re.search(r"^::error file=contracts\.toml,line=\d+,title=", res.stdout, re.M)
    assert res.stdout.splitlines()[-1].startswith("kcgate diff: BLOCKED: 1 blocking change")


@pytest.mark.parametrize(
    ("command", "formats"),
    [
        ("validate", "console|json|github"),
        ("diff", "console|markdown|json|github"),
        ("compare", "console|markdown|json|github"),
        ("runners", "console|json"),
        ("calibrate", "console|json"),
        ("report", "console|github|json"),
        ("mutate", "console|json|markdown"),
        ("run", "console|json"),
        ("schema", "json"),
    ],
)
def test_every_reporting_command_takes_format(command: str, formats: str) -> None:
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and f"--format [{formats}]" in res.output


def _complete(words: str) -> list[str]:
    """What bash completion offers after ``words`` (the last word is the one being completed)."""
    env = {**os.environ, "_KCGATE_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    env["PYTHONPATH"] = str(ROOT)
    code = "import sys; sys.argv = ['kcgate']; from kcgate.cli import main; main()"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_shell_completion_offers_the_choices() -> None:
    assert _complete("kcgate run --device ") == ["cpu", "cuda", "rocm", "xpu", "mps", "npu"]
    assert _complete("kcgate run --device c") == ["cpu", "cuda"]
    assert _complete("kcgate run --isolation ") == ["process", "none"]
    assert _complete("kcgate validate --format g") == ["github"]
    assert "validate" in _complete("kcgate va")
    assert "--install-completion" in CliRunner().invoke(app, ["--help"]).output


def test_a_bad_device_or_isolation_is_still_kcgates_error() -> None:
    res = kcgate("run", "--device", "tpu", cwd=ROOT)
    assert res.returncode == 3 and "unknown device 'tpu'; choose one of: " in res.stderr
    res = kcgate("run", "--isolation", "threads", "--list", cwd=ROOT)
    assert res.returncode == 3 and "choose 'process' or 'none'" in res.stderr


def test_runners_json_is_a_deprecated_alias_of_format_json() -> None:
    pytest.importorskip("torch")
    old, new = kcgate("runners", "--json"), kcgate("runners", "--format", "json")
    assert old.returncode == new.returncode == 0
    assert json.loads(old.stdout)["kind"] == json.loads(new.stdout)["kind"] == "kcgate-runners"
    assert "warning: --json is deprecated; use --format json" in old.stderr and "deprecated" not in new.stderr
