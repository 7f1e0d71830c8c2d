"""One CLI grammar (issue 43): every command, walked through the click app, spells each shared option one way.

The rules, read from ``kcgate.commands._options`` (``SHARED``, ``DEPRECATED``), hold for any command that
follows them, a new one included: no visible deprecated spelling; a shared option with its one short flag
and its choices; a short flag with one meaning; ``--format`` (json among its choices) and ``--output`` on
every command; the contracts file as ``-c/--contracts`` only; plain metavars; an example in every help.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.commands._options import DEPRECATED, SHARED


def _walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command, and every group that runs on its own (``kcgate history``: options of its own)."""
    subs = getattr(command, "commands", None)
    if not subs or (path and any(p.name != "help" for p in command.params)):
        yield path, command
    for name, sub in sorted((subs or {}).items()):
        yield from _walk(sub, (*path, name))


ROOT = typer.main.get_command(app)
COMMANDS = list(_walk(ROOT))
IDS = [" ".join(p) for p, _ in COMMANDS]


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and not p.hidden]


def _long(param: Any) -> str:
    return next((o for o in param.opts if o.startswith("--")), param.opts[0])


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_walk_finds_every_command() -> None:
    assert {"run", "validate", "report", "diff", "compare", "mutate", "calibrate", "baseline update"} <= set(
        IDS
    )
    assert {"history", "history add", "history rebuild"} <= set(IDS) and "baseline" not in IDS


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_no_second_spelling(path: tuple[str, ...], command: Any) -> None:
    for param in _options(command):
        for opt in (*param.opts, *param.secondary_opts):
            assert opt not in DEPRECATED, f"kcgate {' '.join(path)}: {opt} is deprecated: {DEPRECATED[opt]}"
        long = _long(param)
        if long in SHARED:
            row = SHARED[long]
            shorts = sorted(o for o in param.opts if not o.startswith("--"))
            assert shorts == ([row.short] if row.short else []), f"kcgate {' '.join(path)} {long}: {shorts}"
            if row.choices:
                shown = (param.metavar or "").strip("[]").split("|")
                assert set(shown) <= set(row.choices), f"kcgate {' '.join(path)} {long}: {param.metavar}"
    visible = [p for p in command.params if p.param_type_name == "argument" and not p.hidden]
    assert "contracts" not in {p.name for p in visible}, (
        f"kcgate {' '.join(path)}: a positional contracts file"
    )
    named = [p for p in command.params if p.name == "contracts" and p.param_type_name == "option"]
    for param in named:
        assert sorted(param.opts) == ["--contracts", "-c"], f"kcgate {' '.join(path)}: {param.opts}"


def test_a_short_flag_means_one_option_everywhere() -> None:
    meaning: dict[str, tuple[str, str]] = {}
    for path, command in COMMANDS:
        for param in _options(command):
            for short in (o for o in param.opts if not o.startswith("--")):
                long = _long(param)
                seen = meaning.setdefault(short, (long, " ".join(path)))
                assert seen[0] == long, (
                    f"{short}: {seen[0]} in kcgate {seen[1]}, {long} in kcgate {' '.join(path)}"
                )


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_command_takes_format_json_and_output(path: tuple[str, ...], command: Any) -> None:
    by_name = {_long(p): p for p in _options(command)}
    assert "--format" in by_name and "--output" in by_name, f"kcgate {' '.join(path)}"
    assert "json" in by_name["--format"].metavar.strip("[]").split("|"), by_name["--format"].metavar


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_has_plain_metavars_and_an_example(path: tuple[str, ...], command: Any) -> None:
    text = _help(path)
    assert not re.search(r"<(list|str|int|float|path|bool)\b|\[\w+\]>", text, re.I), text
    assert "\\[" not in text, text  # rich's markup escape, printed as is in plain help
    usage = next(line for line in text.splitlines() if line.startswith("Usage:"))
    assert not re.search(r"\.\.\.\W*\.\.\.", usage), (
        usage
    )  # "{RESULTS...}...": a metavar and typer both add "..."
    assert "{" not in usage, usage  # click's BASE CURRENT, never typer's "{base} {current}"
    for shown in (p for p in command.params if not p.hidden and p.param_type_name == "argument"):
        assert (shown.metavar or shown.name.upper()) in usage, usage
    for hidden in (p for p in command.params if p.hidden and p.param_type_name == "argument"):
        assert (hidden.metavar or hidden.name).upper() not in usage.upper(), usage
    assert "Example" in text and f"kcgate {' '.join(path)}" in text, f"kcgate {' '.join(path)}: no example"


def test_the_root_help_has_an_example() -> None:
    assert "Example: kcgate init" in _help(())


def test_deprecated_spellings_still_work_and_say_so(tmp_path: Any) -> None:
    from tests.conftest import ROOT as REPO
    from tests.conftest import kcgate

    res = kcgate("validate", "contracts.toml", cwd=REPO)
    assert res.returncode == 0 and "a positional contracts file is deprecated" in res.stderr, res.stderr
    res = kcgate("report", str(tmp_path), "--no-annotations", cwd=tmp_path)
    assert "--annotations/--no-annotations is deprecated" in res.stderr


def test_format_json_prints_json_and_output_writes_it(tmp_path: Any) -> None:
    """Every cheap command, run: ``--format json`` is one JSON document on stdout, and ``--output`` puts
    the same document in a file (mutate, calibrate and init run kernels: their tests cover them)."""
    import json

    from tests.conftest import ROOT as REPO
    from tests.conftest import kcgate
    from tests.testing.report_samples import write_results_pair

    base, current = write_results_pair(tmp_path)
    runs = [
        (("validate",), REPO, 0),
        (("schema", "results"), REPO, 0),
        (("run", "--list", "-k", "gemm"), REPO, 0),
        (("diff", str(base), str(current)), tmp_path, 1),
        (("compare", str(current)), tmp_path, 0),
        (("report", str(current), "--baseline", str(base)), tmp_path, 1),
        (("baseline", "update", str(current), "--dir", str(tmp_path / "b")), tmp_path, 0),
        (
            (
                "merge",
                str(current / "kcgate-results-cpu-x86" / "cpu-x86.json"),
                "--results",
                str(tmp_path / "m.json"),
            ),
            tmp_path,
            0,
        ),
    ]
    for args, cwd, code in runs:
        res = kcgate(*args, "--format", "json", cwd=cwd)
        assert res.returncode == code, (args, res.stderr)
        doc = json.loads(res.stdout)
        out = tmp_path / "out.json"
        again = kcgate(*args, "--format", "json", "--output", str(out), cwd=cwd)
        assert again.returncode == code and again.stdout == "", (args, again.stdout)
        assert type(json.loads(out.read_text())) is type(doc), args


def test_out_is_a_hidden_alias_that_says_what_replaces_it(tmp_path: Any) -> None:
    """``-o`` is ``--output`` on every command now; the file a command writes has its own name (--results,
    init's -c/--contracts, baseline fetch's --dir), and the old ``--out`` still works, hidden, with one
    deprecation line on stderr (stdout stays the command's own)."""
    from tests.conftest import ROOT as REPO
    from tests.testing.git_history import make_repo
    from tests.testing.report_samples import write_results_pair

    _base, current = write_results_pair(tmp_path)
    one = str(current / "kcgate-results-cpu-x86" / "cpu-x86.json")
    runner = CliRunner()
    res = runner.invoke(app, ["merge", one, "--out", str(tmp_path / "m.json")])
    assert res.exit_code == 0 and (tmp_path / "m.json").is_file(), res.output
    assert res.stderr.count("deprecated") == 1 and "use --results PATH" in res.stderr, res.stderr
    assert "deprecated" not in res.stdout
    # -o in its old place now writes the rendered report; merge then asks for --results (exit 3)
    res = runner.invoke(app, ["merge", one, "-o", str(tmp_path / "m2.json")])
    assert res.exit_code == 3 and "--results PATH" in res.output and not (tmp_path / "m2.json").exists()
    res = runner.invoke(app, ["merge", one, "--out", "a.json", "--results", "b.json"])
    assert res.exit_code == 3 and "give one" in res.output
    contracts = str(REPO / "contracts.toml")
    res = runner.invoke(
        app, ["run", "--list", "-k", "gemm", "-c", contracts, "--out", str(tmp_path / "r.json")]
    )
    assert res.exit_code == 0 and res.stderr.count("--out is deprecated; use --results PATH") == 1
    res = runner.invoke(
        app, ["run", "--list", "-k", "gemm", "-c", contracts, "-o", str(tmp_path / "plan.json")]
    )
    assert (
        res.exit_code == 0 and "-o/--output" in res.stderr and "--results names the .json file" in res.stderr
    )
    assert "gemm" in (tmp_path / "plan.json").read_text()  # -o: the rendered plan
    main, _ = make_repo(tmp_path / "repo", 1, 0)
    res = runner.invoke(app, ["baseline", "fetch", "--history", str(tmp_path / "none"), "--commit", main[0],
                              "--repo-dir", str(tmp_path / "repo"), "--out", str(tmp_path / "f")])  # fmt: skip
    assert res.exit_code == 0 and "use --dir DIR" in res.stderr and (tmp_path / "f").is_dir(), res.output


def test_the_grammar_rows_name_every_short_flag() -> None:
    """-o, -q and -v are rows of SHARED with one meaning each; --out is only a deprecated spelling."""
    assert (SHARED["--output"].short, SHARED["--quiet"].short, SHARED["--verbose"].short) == (
        "-o",
        "-q",
        "-v",
    )
    assert "--out" in DEPRECATED and "--out" not in SHARED
