"""Damaged and double-meaning results files through the CLI (#44, the second attack suite): a file that says
two things (a key twice, a case twice, a non-boolean ``complete``) is exit 3 naming it, never read one way;
what a damaged file says never reaches the log as a workflow command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import DATA, kcgate

CURRENT = DATA / "diff" / "current.json"


def _doc() -> dict[str, object]:
    return json.loads(CURRENT.read_text())


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _diff(tmp_path: Path, current: Path, *extra: str):  # type: ignore[no-untyped-def]
    return kcgate("diff", str(DATA / "diff" / "base.json"), str(current), *extra, cwd=tmp_path)


def _text_with_second(key: str, value: object, first: bool) -> str:
    """The sample file with ``key`` given twice: the second value first or last in the object."""
    text = json.dumps(_doc())
    extra = f'"{key}": {json.dumps(value)}'
    return "{" + extra + ", " + text[1:] if first else text[:-1] + ", " + extra + "}"


@pytest.mark.parametrize(
    ("key", "value"),
    [("cases", []), ("complete", True), ("runner", "other"), ("fingerprint", {"backend": "cpu"})],
)
@pytest.mark.parametrize("first", [True, False], ids=["first", "last"])
def test_a_key_given_twice_is_exit_3(tmp_path: Path, key: str, value: object, first: bool) -> None:
    """JSON readers disagree on a duplicate key (Python keeps the last, others the first): a file with its
    passing cases under a second "cases" key read as all-pass in kcgate and as failing elsewhere."""
    path = _write(tmp_path / "cur.json", _text_with_second(key, value, first))
    proc = _diff(tmp_path, path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"'{key}' twice" in proc.stderr and "cur.json" in proc.stderr, proc.stderr


def test_a_key_twice_inside_a_case_is_exit_3(tmp_path: Path) -> None:
    doc = _doc()
    text = json.dumps(doc)
    first = next(iter(doc["cases"]))  # type: ignore[call-overload]
    assert isinstance(first, dict)
    inner = json.dumps(first)
    text = text.replace(inner, inner[:-1] + ', "status": "pass"}', 1)
    proc = _diff(tmp_path, _write(tmp_path / "cur.json", text))
    assert proc.returncode == 3 and "'status' twice" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", ["false", "yes", 0, None])
def test_complete_must_be_a_boolean(tmp_path: Path, value: object) -> None:
    """``"complete": "false"`` read as true: a truncated run's missing cases were called removed."""
    doc = _doc()
    doc["complete"] = value
    proc = _diff(tmp_path, _write(tmp_path / "cur.json", json.dumps(doc)))
    assert proc.returncode == 3 and "complete" in proc.stderr, proc.stderr


@pytest.mark.parametrize("fmt_cmd", ["diff", "report"])
@pytest.mark.parametrize(
    "hostile",
    [
        "x\r\n::error::pwn",
        "x\u2028::error::pwn",
        "x%0A::error::pwn",
        "::stop-commands::tok",
        "x\x85::warning::a",
    ],
)
def test_workflow_commands_in_a_runner_or_contract_never_start_a_line(
    tmp_path: Path, fmt_cmd: str, hostile: str
) -> None:
    doc = _doc()
    doc["runner"] = "cpu-ci" + hostile
    for case in doc["cases"]:  # type: ignore[attr-defined]
        case["contract_id"] = case["contract_id"] + hostile
        case["case_id"] = case["case_id"] + hostile
        case["message"] = hostile
    cur = tmp_path / "cur"
    cur.mkdir()
    _write(cur / "cpu.json", json.dumps(doc))
    if fmt_cmd == "diff":
        proc = _diff(tmp_path, cur / "cpu.json", "--format", "github")
    else:
        base = tmp_path / "base"
        base.mkdir()
        (base / "cpu-ci.json").write_text((DATA / "diff" / "base.json").read_text())
        proc = kcgate("report", str(cur), "--baseline", str(base), "--format", "github", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    lines = re.split(r"\r\n|\r|\n|\u2028|\u2029|\x85|\x0b|\x0c", proc.stdout + proc.stderr)
    ours = re.compile(r"^::(error|warning|notice)( [^:]*)?::")
    for line in lines:
        stripped = line.lstrip()
        assert not stripped.startswith("::") or ours.match(stripped), line
        if ours.match(stripped):
            assert "\r" not in line and "::error::pwn" not in stripped.split("::", 2)[1], line


def test_a_history_log_line_with_a_key_twice_is_exit_3(tmp_path: Path) -> None:
    """The data branch's log is read by the same reader: a header whose "pr" is given twice."""
    added = kcgate(
        "history", "add", str(CURRENT), "--commit", "abc1234", "--time", "2026-12-01T00:00:00Z",
        "--db", str(tmp_path / "h.db"), "--log", str(tmp_path / "log"), cwd=tmp_path,
    )  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    (log,) = (tmp_path / "log").rglob("*.jsonl")
    lines = log.read_text().split("\n")
    lines[0] = lines[0][:-1] + ', "pr": 7}'  # the header has "pr": null first
    log.write_text("\n".join(lines))
    proc = kcgate("history", "rebuild", str(tmp_path / "log"), "--db", str(tmp_path / "h2.db"), cwd=tmp_path)
    assert proc.returncode == 3 and "'pr' twice" in proc.stderr and log.name in proc.stderr, proc.stderr
