"""-q/--quiet and -v/--verbose (issue 55, one grammar): every command has both, from their rows of
``_options.SHARED``, and each means one thing: quiet prints only errors, warnings and the verdict line, so
its lines are some of the default's and fewer when the default says more; verbose prints at least the
default's lines. Every command is run here at the three levels, the cheap ones in process; those that
run kernels (run, init, runners) in real subprocesses, in the slow tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.commands._options import SHARED, VERBOSITY
from tests.commands.test_grammar import COMMANDS, IDS
from tests.conftest import ROOT, kcgate
from tests.testing.git_history import make_repo, record
from tests.testing.report_samples import write_results_pair

LEVELS = ("-q", "", "-v")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_command_has_quiet_and_verbose(path: tuple[str, ...], command: Any) -> None:
    flags = {tuple(sorted(p.opts)): p for p in command.params if p.param_type_name == "option"}
    for flag in VERBOSITY:
        assert tuple(sorted((flag, SHARED[flag].short))) in flags, f"kcgate {' '.join(path)} lacks {flag}"


def _invoke(args: list[str], level: str) -> tuple[int, list[str]]:
    """Exit code and non-blank lines (stdout and stderr) of ``kcgate ARGS LEVEL``; its paths are its own."""
    own = f"-level{level or '-n'}"
    named = [a.replace("{level}", own) for a in args]
    result = CliRunner().invoke(app, [*named, *([level] if level else [])], env={"COLUMNS": "200"})
    return result.exit_code, [line.replace(own, "") for line in result.output.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cheap(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each cheap command (every one that runs no kernel) with arguments that make it print something; a
    command that changes a file or a store gets its own one per level (``{level}`` in a path)."""
    tmp = tmp_path_factory.mktemp("levels")
    base, current = write_results_pair(tmp)
    one = str(current / "kcgate-results-cpu-x86" / "cpu-x86.json")
    main, _pr = make_repo(tmp / "repo", 2, 1)
    record(tmp / "history", main[0], 0)
    assert CliRunner().invoke(app, ["history", "add", one, "--commit", "a" * 40, "--db", str(tmp / "h.db")])
    contracts = str(ROOT / "contracts.toml")
    return {
        "validate": ["validate", "-c", contracts],
        "schema": ["schema", "results"],
        "diff": ["diff", str(base), str(current), "--format", "console"],
        "compare": ["compare", str(current)],
        "report": ["report", str(current), "--baseline", str(base), "--format", "console"],
        "merge": ["merge", one, "--results", f"{tmp}/merged{{level}}.json"],
        "baseline update": ["baseline", "update", str(current), "--dir", f"{tmp}/b{{level}}"],
        "baseline record": [
            "baseline",
            "record",
            str(current),
            "--commit",
            "b" * 40,
            "--history",
            f"{tmp}/r{{level}}",
        ],
        "baseline fetch": [
            "baseline",
            "fetch",
            "--history",
            str(tmp / "history"),
            "--commit",
            main[-1],
            "--repo-dir",
            str(tmp / "repo"),
            "--dir",
            f"{tmp}/fetched{{level}}",
        ],  # fmt: skip
        "history": ["history", "--db", str(tmp / "h.db")],
        "history add": ["history", "add", one, "--commit", "c" * 40, "--db", f"{tmp}/h{{level}}.db"],
        "history rebuild": ["history", "rebuild", str(tmp / "history"), "--db", f"{tmp}/hr{{level}}.db"],
        "run": ["run", "--list", "-k", "gemm", "-c", contracts],  # the plan: no kernel runs
    }


KERNEL_COMMANDS = {"run", "init", "mutate", "calibrate", "runners"}  # below, or their own tests


def test_every_command_is_run_at_every_level(cheap: dict[str, list[str]]) -> None:
    assert set(IDS) <= set(cheap) | KERNEL_COMMANDS, sorted(set(IDS) - set(cheap) - KERNEL_COMMANDS)


@pytest.mark.parametrize("name", ["validate", "schema", "diff", "compare", "report", "merge", "baseline update",
                                  "baseline record", "baseline fetch", "history", "history add",
                                  "history rebuild", "run"])  # fmt: skip
def test_quiet_says_less_and_verbose_more(cheap: dict[str, list[str]], name: str) -> None:
    (qc, quiet), (nc, normal), (vc, verbose) = (_invoke(cheap[name], level) for level in LEVELS)
    assert qc == nc == vc and nc in (0, 1), (name, qc, nc, vc, normal)
    assert quiet and set(quiet) <= set(normal) <= set(verbose), (name, quiet, normal, verbose)
    if len(normal) > 1 and name not in ("schema", "baseline update", "baseline record"):
        assert len(quiet) < len(normal), (name, quiet, normal)  # a verdict line out of several


def test_quiet_keeps_the_verdict_line(cheap: dict[str, list[str]]) -> None:
    assert _invoke(cheap["diff"], "-q")[1] == ["kcgate diff: BLOCKED: 1 blocking change"]
    assert _invoke(cheap["report"], "-q")[1][0].startswith("kcgate report: FAIL: 1 blocking")
    assert _invoke(cheap["compare"], "-q")[1] == ["kcgate compare: 1 contracts x 1 runners"]


def test_verbose_shows_more_where_there_is_more(cheap: dict[str, list[str]]) -> None:
    """diff -v lists the unchanged case too; report -v the diff's table; validate -v each contract."""
    assert len(_invoke(cheap["diff"], "-v")[1]) == len(_invoke(cheap["diff"], "")[1]) + 1
    assert any("new-violation" in line for line in _invoke(cheap["report"], "-v")[1])
    assert sum(": C-" in line for line in _invoke(cheap["validate"], "-v")[1]) > 10


def test_json_is_never_cut(cheap: dict[str, list[str]]) -> None:
    docs = [
        CliRunner().invoke(app, [*cheap["diff"][:3], "--format", "json", *lv]).stdout for lv in (["-q"], [])
    ]
    assert json.loads(docs[0]) == json.loads(docs[1])


def test_quiet_and_verbose_together_is_bad_usage(cheap: dict[str, list[str]]) -> None:
    result = CliRunner().invoke(app, [*cheap["diff"], "-q", "-v"])
    assert result.exit_code == 3 and "-q/--quiet and -v/--verbose together" in result.output


@pytest.mark.slow  # two kcgate runs of three cases, in subprocesses (~30 s each on a loaded 2-core machine)
def test_run_quiet_is_the_verdict_and_verbose_a_line_per_case(tmp_path: Path) -> None:
    args = ("run", "-c", str(ROOT / "contracts.toml"), "-k", "gather", "--seed", "1", "--shrink-s", "0")
    quiet = kcgate(*args, "--results", str(tmp_path / "q.json"), "-q", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == "all contracts hold: 3 pass\n", quiet.stdout
    assert quiet.stderr == "", quiet.stderr  # no progress, no note
    verbose = kcgate(*args, "--results", str(tmp_path / "v.json"), "-v", cwd=tmp_path, env={"CI": "true"})
    assert verbose.returncode == 0 and "all contracts hold: 3 pass" in verbose.stdout
    assert len(verbose.stdout.splitlines()) > 3  # the table
    assert [ln.split()[0] for ln in verbose.stderr.splitlines()] == [
        "[1/3]",
        "[2/3]",
        "[3/3]",
    ]  # not CI's 10%
    assert (tmp_path / "q.json").is_file() and (tmp_path / "v.json").is_file()


@pytest.mark.slow  # init probes the package in a worker process; runners imports torch
def test_init_and_runners_quiet(tmp_path: Path) -> None:
    pkg = "tests.testing.kernels.scratchpkg"
    common = ("init", pkg, "--path", str(ROOT), "--no-run")
    normal = kcgate(*common, cwd=tmp_path)
    assert normal.returncode == 0, normal.stderr
    quiet = kcgate(*common, "--force", "-q", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout.splitlines() == [next(ln for ln in normal.stdout.splitlines() if ln.startswith("wrote"))
                                         .replace("wrote", "kcgate init: wrote", 1)]  # fmt: skip
    runners = [kcgate("runners", *lv, cwd=tmp_path) for lv in (["-q"], [])]
    assert runners[0].stdout.splitlines() == [
        runners[1].stdout.splitlines()[-1 - _fingerprint(runners[1].stdout)]
    ]


def _fingerprint(text: str) -> int:
    """How many lines follow ``default backend: ...`` (the fingerprints)."""
    lines = text.splitlines()
    return len(lines) - 1 - next(i for i, ln in enumerate(lines) if ln.startswith("default backend:"))
