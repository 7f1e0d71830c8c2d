"""mutate's cache and generator under attack (#44): a planted symlink, a damaged or forged cache, a huge
kernel module, a module with a BOM or a coding line."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kcgate.calibration import mutants as mm
from kcgate.calibration import mutate as mut
from kcgate.calibration import mutate_cache as mc
from kcgate.contracts.load import load_project
from kcgate.execution.executors import InProcessExecutor
from kcgate.vocab.mutation_rules import BY_NAME
from tests.conftest import kcgate

_M = mm.Mutant("c", "constant-changed", "constant", "L1C0-L1C3#0", 1, "0.5 x 2", "diff", "k1")


def _cache_with(tmp_path: Path, *results: mm.MutantResult) -> Path:
    cache = mc.Cache(tmp_path)
    for r in results:
        cache.put(r)
    cache.save()
    return tmp_path / mc.CACHE_FILE


# ---- the cache file is written like the journal (no-follow, exclusive, rename) -------------------------


def test_a_symlink_planted_at_the_temporary_file_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "mutate.tmp").symlink_to(victim)
    path = _cache_with(cache_dir, mm.MutantResult(_M, mm.KILLED, 1))
    assert victim.read_text() == "keep me"
    assert path.is_file() and not path.is_symlink()


def test_a_symlink_at_the_cache_file_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / mc.CACHE_FILE).symlink_to(victim)
    path = _cache_with(cache_dir, mm.MutantResult(_M, mm.KILLED, 1))
    assert victim.read_text() == "keep me" and path.is_file() and not path.is_symlink()


# ---- a damaged cache is a cold cache; a forged one is too ------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,
        '{"version": 2, "entries": 5}',
        '{"version": 2, "entries": {"k1": {"cases": "many"}}, "mac": "x"}',
        '{"version": 2, "entries": [], "mac": 7}',
        "\udcff not json",
        "",
    ],
)
def test_a_damaged_cache_is_cold(tmp_path: Path, text: str) -> None:
    (tmp_path / mc.CACHE_FILE).write_bytes(text.encode("utf-8", "surrogateescape"))
    cache = mc.Cache(tmp_path)
    assert cache.get("k1") is None and cache.original("k1") is None


def test_a_fifo_cache_is_cold_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / mc.CACHE_FILE)
    assert mc.Cache(tmp_path).get("k1") is None


def test_a_signed_entry_of_the_wrong_types_is_a_miss(tmp_path: Path) -> None:
    cache = mc.Cache(tmp_path)
    cache.entries["orig"] = {"cases": "many", "false_alarms": 0}
    cache.entries["k1"] = {"outcome": "survived", "cases_run": [1], "budget_used": "x"}
    cache.entries["k2"] = {"outcome": "obliterated"}
    cache.save()
    again = mc.Cache(tmp_path)
    assert again.original("orig") is None and again.get("k1") is None and again.get("k2") is None


def test_a_forged_survivor_is_not_reported(tmp_path: Path) -> None:
    """A hostile ``survived`` entry with its own diff: unsigned, it is a miss; and a signed outcome never
    brings a diff of its own (the diff is made from the module as it is now)."""
    forged = mm.MutantResult(_M, mm.SURVIVED, 1).to_json() | {"diff": "+ evil"}
    doc = {"version": mm.CACHE_VERSION, "entries": {"k1": forged}, "mac": "0" * 64}
    (tmp_path / mc.CACHE_FILE).write_text(json.dumps(doc))
    assert mc.Cache(tmp_path).get("k1") is None
    _cache_with(tmp_path, mm.MutantResult(_M, mm.SURVIVED, 1))
    assert "diff" not in json.loads((tmp_path / mc.CACHE_FILE).read_text())["entries"]["k1"]


def test_an_edited_cache_file_is_cold(tmp_path: Path) -> None:
    path = _cache_with(tmp_path, mm.MutantResult(_M, mm.KILLED, 1))
    path.write_text(path.read_text().replace('"killed"', '"survived"'))
    assert mc.Cache(tmp_path).get("k1") is None


def test_a_signed_entry_round_trips(tmp_path: Path) -> None:
    _cache_with(tmp_path, mm.MutantResult(_M, mm.KILLED, 3, "c/x: fail", 2.5))
    hit = mc.Cache(tmp_path).get("k1")
    assert hit is not None and (hit.outcome, hit.cases_run, hit.killed_by, hit.budget_used) == (
        mm.KILLED,
        3,
        "c/x: fail",
        2.5,
    )


# ---- generation is bounded ---------------------------------------------------------------------------------


def _big_project(tmp_path: Path, lines: int) -> Path:
    body = "".join(f"    y = y * 1.5 + {i}.25\n" for i in range(lines))
    (tmp_path / "big.py").write_text(
        f"import torch\n\n\ndef k(x):\n    y = x\n{body}    return torch.softmax(x, -1)\n"
    )
    toml = tmp_path / "contracts.toml"
    toml.write_text(
        '[project]\nname = "t"\npaths = ["."]\n\n[[contract]]\nid = "sm"\nclass = "C-PRC-01"\nop = "softmax"\n'
        'kernel = "big:k"\nshapes = [[4, 64]]\nprotocol = { seeds = 1, boundary = false }\n'
    )
    return toml


def test_preparing_a_2000_line_kernel_splices_nothing(tmp_path: Path) -> None:
    """Before: every mutant was spliced, parsed and diffed up front (383 s, 250 MB at 2,000 lines)."""
    project = load_project(_big_project(tmp_path, 2000))
    t0 = time.monotonic()
    target = mut.prepare(project, project.contracts[0], mut.RULES, 0)
    assert time.monotonic() - t0 < 20 and len(target.sites) > 2000


class _Counting(InProcessExecutor):
    """A real in-process executor that records how many mutant files exist when each case runs."""

    seen: list[int] = []

    def run(self, case, kernel=None):  # type: ignore[no-untyped-def]
        if kernel:
            _Counting.seen.append(len(list(self.project.paths[0].glob(f"{mm.PREFIX}*.py"))))
        return super().run(case, kernel)


def test_max_mutants_bounds_what_is_written(tmp_path: Path) -> None:
    project = load_project(_big_project(tmp_path, 1000))
    _Counting.seen = []
    t0 = time.monotonic()
    report = mut.mutate(
        [project], lambda p: _Counting(p, "cpu"), max_mutants=1, budget_s=120, advice=False,
        rules=(BY_NAME["constant-changed"],),
    )  # fmt: skip
    assert time.monotonic() - t0 < 60
    assert _Counting.seen and max(_Counting.seen) == 1, _Counting.seen  # one file, written when it ran
    assert sum(m.outcome != mm.NOT_RUN for m in report.mutants) == 1


def test_a_module_over_the_cap_is_skipped_naming_the_cap(tmp_path: Path) -> None:
    toml = _big_project(tmp_path, 2000)
    (tmp_path / "big.py").write_text((tmp_path / "big.py").read_text() + "#" * (mut.MAX_MODULE_BYTES + 1))
    project = load_project(toml)
    target = mut.prepare(project, project.contracts[0], mut.RULES, 0)
    assert target.sites == [] and f"{mut.MAX_MODULE_BYTES}-byte cap" in target.report.skipped
    assert "smaller module" in target.report.skipped


def test_a_deeply_nested_kernel_module_is_skipped_not_exit_4(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text("def k(x):\n    return " + "(" * 5000 + "x" + ")" * 5000 + "\n")
    toml = tmp_path / "contracts.toml"
    toml.write_text(
        '[project]\nname = "t"\npaths = ["."]\n\n[[contract]]\nid = "sm"\nclass = "C-PRC-01"\nop = "softmax"\n'
        'kernel = "deep:k"\nshapes = [[4, 64]]\n'
    )
    proc = kcgate("mutate", str(toml), "--no-cache", "--no-advice", cwd=tmp_path)
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


# ---- source decoded as Python decodes it --------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbfimport torch\n\n\ndef k(x):\n    return torch.softmax(x * 1.0, -1)\n",
        b"# -*- coding: latin-1 -*-\nimport torch\n\n\ndef k(x):\n    s = '\xe9'\n"
        b"    return torch.softmax(x * 1.0, -1)\n",
    ],
)
def test_a_module_with_a_bom_or_a_coding_line_is_mutated(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "enc.py").write_bytes(raw)
    toml = tmp_path / "contracts.toml"
    toml.write_text(
        '[project]\nname = "t"\npaths = ["."]\n\n[[contract]]\nid = "sm"\nclass = "C-PRC-01"\nop = "softmax"\n'
        'kernel = "enc:k"\nshapes = [[4, 64]]\n'
    )
    project = load_project(toml)
    target = mut.prepare(project, project.contracts[0], mut.RULES, 0)
    assert not target.report.skipped and target.sites, target.report.skipped


def test_a_module_planted_under_a_mutants_name_is_replaced(tmp_path: Path) -> None:
    """Mutants are written when they run, so a running mutant could plant the next one's file first."""
    project = load_project(_big_project(tmp_path, 3))
    target = mut.prepare(project, project.contracts[0], mut.RULES, 0)
    m = target.make(target.sites[0])
    assert m is not None
    here = tmp_path / "here"
    here.mkdir()
    victim = tmp_path / "victim.py"
    victim.write_text("planted")
    (here / f"{m.module}.py").symlink_to(victim)
    mut._Sample(here, lambda p: None, 0, None, None, time.monotonic).write(m, "utf-8")
    assert victim.read_text() == "planted"
    assert (here / f"{m.module}.py").read_text() == m.source and not (here / f"{m.module}.py").is_symlink()


def test_a_cache_directory_that_is_a_file_is_an_io_fault_naming_it(tmp_path: Path) -> None:
    from kcgate.errors import ExitCode, IOFault

    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    cache = mc.Cache(blocker)
    assert cache.get("k1") is None  # read: cold
    with pytest.raises(IOFault) as err:
        cache.save()
    assert str(blocker) in str(err.value) and err.value.exit_code == ExitCode.BAD_USAGE
