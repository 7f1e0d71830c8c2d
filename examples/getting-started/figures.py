"""Regenerate every figure of docs/getting-started.md by running its steps on this two-kernel package.

    python examples/getting-started/figures.py           # check: exit 1 when the doc's figures differ
    python examples/getting-started/figures.py --write   # rewrite the doc's figures

Each figure is a fenced block in the doc that follows a ``<!-- figure: NAME -->`` line. The steps run in a
temporary copy of ``src/mykernels`` (init, run, baseline, the bfloat16 "speed-up", run, diff) with kcgate from
this checkout. The check compares after masking what differs between machines and seeds (decimal numbers,
the CPU's name): the counts, categories, statuses, case ids and causes must match exactly.
tests/docs/test_getting_started.py runs the check (the full suite, so CI).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "getting-started.md"
FIGURE = re.compile(r"(<!-- figure: ([a-z-]+) -->\n```[a-z]*\n)(.*?)(```)", re.S)
BF16_GEMM = "    return (a.bfloat16() @ b.bfloat16()).to(a.dtype)\n"
QUICK_RUN_ROWS = 1  # the quick run's table is shown by its first row, then "..."
DIFF_ROWS = 2  # the diff's blocking rows shown


def kcgate(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd / 'src'}", "COLUMNS": "200", "CI": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "kcgate", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode not in (0, 1):
        raise SystemExit(f"kcgate {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return proc.stdout.replace(f"{cwd}/", "")


def figures() -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="kcgate-getting-started-") as tmp:
        work = Path(tmp)
        shutil.copytree(HERE / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
        init = kcgate(
            "init", "mykernels", "--github", "--repo", "acme/mykernels",
            "--runner", "nvidia-h100=self-hosted,linux,nvidia", "--runner", "cpu-ubuntu=ubuntu-latest",
            cwd=work,
        )  # fmt: skip
        contract = _first_contract((work / "contracts.toml").read_text())
        kcgate("run", "--runner", "cpu-ubuntu", "--seed", "1", "-q", cwd=work)
        kcgate("baseline", "update", "results/cpu-ubuntu.json", "--dir", "baselines", cwd=work)
        ops = work / "src" / "mykernels" / "ops.py"
        ops.write_text(ops.read_text().replace("    return a @ b\n", BF16_GEMM))
        kcgate("run", "--runner", "cpu-ubuntu", "--seed", "1", "-q", cwd=work)
        diff = kcgate("diff", "baselines/cpu-ubuntu.json", "results/cpu-ubuntu.json", cwd=work)
    return {"init": _quick_run(init), "contract": contract, "diff": _diff(diff)}


def _quick_run(text: str) -> str:
    """init's output with its quick run's table cut to its first row and its summary line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("status "))
    end = next(
        i for i, line in enumerate(lines) if i > start and not line.startswith(("PASS", "FAIL", "ERROR", "-"))
    )
    rows = [line.rstrip() for line in lines[start + 2 : end]][:QUICK_RUN_ROWS]
    return "\n".join([*lines[:start], lines[start].rstrip(), *rows, "...", *lines[end:]]) + "\n"


def _first_contract(text: str) -> str:
    """The first contract table of the written file, with the comment line above it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line == "[[contract]]")
    end = next((i for i, line in enumerate(lines) if i > start and not line.strip()), len(lines))
    return "\n".join(lines[start - 1 : end]) + "\n"


def _diff(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    rows = [line for line in lines if line.startswith("!")][:DIFF_ROWS]
    header = next(line for line in lines if "CATEGORY" in line)
    return "\n".join([*lines[:2], "", header, *rows]) + "\n"


def mask(text: str) -> str:
    """What may differ between machines and seeds: decimal numbers, the machine, which gradient is worst,
    column widths."""
    text = re.sub(r"cpu-[a-z0-9_]+ \(.*\)$", "cpu-ARCH (MACHINE)", text, flags=re.M)  # "Intel(R) ..." nests
    # which operand's gradient used the most budget follows the seed (init's quick run draws its own)
    text = re.sub(r"\(grad \w+\)|gradient of '\w+'", "GRAD", text)
    text = re.sub(r"[×≈]?\d+\.\d+(?:e[+-]\d+)?", "#", text)
    return re.sub(r"[ \t]+", " ", text)


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    found = {m.group(2): m.group(3) for m in FIGURE.finditer(doc)}
    made = figures()
    if set(found) != set(made):
        print(f"{DOC}: figures {sorted(found)}, expected {sorted(made)}", file=sys.stderr)
        return 1
    if "--write" in argv:
        DOC.write_text(FIGURE.sub(lambda m: m.group(1) + made[m.group(2)] + m.group(4), doc))
        print(f"wrote {len(made)} figures to {DOC}")
        return 0
    stale = [name for name in made if mask(found[name]) != mask(made[name])]
    for name in stale:
        print(f"figure {name!r} is stale; now:\n{made[name]}", file=sys.stderr)
    if stale:
        print("regenerate: python examples/getting-started/figures.py --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
