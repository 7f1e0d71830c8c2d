"""`kcgate mutate` from the command line, in a real subprocess: a report (exit 0) with its JSON and
Markdown files, the cache directory, the budget, and exit 3 on bad usage."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, kcgate

EXAMPLE = ROOT / "examples" / "mutation" / "contracts.toml"


def test_mutate_writes_json_and_markdown_and_caches(tmp_path: Path) -> None:
    out, md, cache = tmp_path / "m.json", tmp_path / "m.md", tmp_path / "cache"
    args = ("mutate", "-c", str(EXAMPLE), "-k", "softmax", "--format", "json", "--output", str(out))
    proc = kcgate(*args, "--summary-out", str(md), "--cache", str(cache), "--no-advice")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "deprecated" not in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "kcgate-mutation" and doc["counts"]["killed"] >= 4
    assert [c["contract_id"] for c in doc["contracts"]] == ["softmax-stable"]
    assert doc["rules"]["neg-inf-to-zero"]["counts"]["killed"] == 1
    assert "| softmax-stable | C-PRC-02 | 0/6 | 100% |" in md.read_text()
    assert (cache / "mutate.json").is_file()
    again = kcgate(*args, "--cache", str(cache), "--no-advice")
    assert again.returncode == 0 and json.loads(out.read_text())["contracts"][0]["mutants"][0]["cached"]


def test_a_spent_budget_is_a_sample_not_a_failure(tmp_path: Path) -> None:
    """Also the deprecated spellings (a positional file, --json PATH): they work and say what replaces them."""
    out = tmp_path / "m.json"
    proc = kcgate("mutate", str(EXAMPLE), "--budget", "0.001", "--no-cache", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("unmutated kernels' false alarms:")
    assert (
        "a positional contracts file is deprecated" in proc.stderr
        and "--json PATH is deprecated" in proc.stderr
    )
    doc = json.loads(out.read_text())
    assert doc["sampled"] and doc["counts"]["not-run"] == sum(len(c["mutants"]) for c in doc["contracts"])
    assert "a seeded sample: the budget ran out" in proc.stdout


def test_bad_usage_exits_3(tmp_path: Path) -> None:
    for args in (("--rule", "nope"), ("--budget", "0"), ("-k", "no-such-contract")):
        proc = kcgate("mutate", "-c", str(EXAMPLE), "--no-cache", *args)
        assert proc.returncode == 3, (args, proc.stdout, proc.stderr)
    assert "unknown; the rules are upcast-dropped" in kcgate("mutate", "--rule", "nope").stderr
