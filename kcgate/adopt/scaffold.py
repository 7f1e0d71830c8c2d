"""``kcgate init``: probe a package in a worker, write a commented contracts.toml, validate it and run it once.

The parent stays torch-free: ``kcgate.adopt.probe`` runs in a subprocess and answers with JSON lines;
``render_contracts`` (pure) turns its placements into the file; the workflow files come from the templates
in docs/templates, filled with the repository's name and runners.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcgate.adopt import tomlout
from kcgate.contracts.fields import CONTRACT_FIELD
from kcgate.errors import KcgateError, KernelStartError, UsageError
from kcgate.util import bounded
from kcgate.vocab.causes import CAUSE
from kcgate.vocab.classes import CLASSES

# The dtypes a first contract claims; others a kernel accepts are named in a comment (float16 kernels
# often accumulate in float16 on some devices: promise it only when you mean it).
FIRST_DTYPES = ("float32", "bfloat16")
# A class that fits each family, in order of preference (the first whose ops include the family).
CLASS_PREFERENCE = ("C-PRC-01", "C-CMP-03", "C-ORD-02")
CLASS_NOTES = {
    "C-PRC-01": "accumulation happens at the declared accumulator precision",
    "C-CMP-03": "correct over the shapes, held-out shapes and fresh inputs",
    "C-ORD-02": "run-to-run determinism",
}
PROBE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Placement:
    """What the probe learned about one kernel (``op`` empty: not placed, ``reason`` says why)."""

    kernel: str
    kind: str
    op: str = ""
    by: str = ""
    dtypes: tuple[str, ...] = ()
    out_dtype: str = ""
    shape: tuple[int, ...] = ()
    backward: bool = False
    init: tuple[tuple[str, str], ...] = ()
    params: tuple[tuple[str, Any], ...] = ()  # the family parameters its signature sets (eps = 1e-6)
    call: tuple[tuple[str, Any], ...] = ()  # keyword arguments every call passes (dim = -1)
    refused: tuple[tuple[str, str], ...] = ()
    note: str = ""
    reason: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Placement:
        if "unplaced" in d:
            return cls(kernel=str(d["kernel"]), kind=str(d.get("kind", "")), reason=str(d["unplaced"]))
        return cls(
            kernel=str(d["kernel"]),
            kind=str(d.get("kind", "")),
            op=str(d["op"]),
            by=str(d.get("by", "")),
            dtypes=tuple(d.get("dtypes", ())),
            out_dtype=str(d.get("out_dtype", "")),
            shape=tuple(d.get("shape", ())),
            backward=bool(d.get("backward")),
            init=tuple((str(k), str(v)) for k, v in (d.get("init") or {}).items()),
            params=tuple((str(k), v) for k, v in (d.get("params") or {}).items()),
            call=tuple((str(k), v) for k, v in (d.get("call") or {}).items()),
            refused=tuple((str(k), str(v)) for k, v in (d.get("refused") or {}).items()),
            note=str(d.get("note", "")),
        )


@dataclass(frozen=True)
class Probed:
    placements: tuple[Placement, ...]
    package_errors: tuple[str, ...] = field(default_factory=tuple)


def probe(packages: Sequence[str], paths: Sequence[Path], timeout: float = PROBE_TIMEOUT_S) -> Probed:
    """Run ``kcgate.adopt.probe`` in a worker process (it imports the packages and torch)."""
    cmd = [sys.executable, "-m", "kcgate.adopt.probe", *packages]
    for p in paths:
        cmd += ["--path", str(p.resolve())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KcgateError(f"probing {' '.join(packages)} took over {timeout:g} s; nothing written") from None
    placements, errors = [], []
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue  # a kernel printing at import time
        d = json.loads(line)
        if "package" in d:
            errors.append(str(d["error"]))
        else:
            placements.append(Placement.from_json(d))
    if proc.returncode != 0 and not placements and not errors:
        tail = proc.stderr.strip()[-1500:]
        if "Traceback" in tail:  # the probe itself raised: kcgate's bug (exit 4), with the traceback
            raise KcgateError(f"the probe process failed (exit {proc.returncode}):\n{tail}")
        names = " ".join(packages)
        raise KernelStartError(  # no traceback: something it imported ended the process (os._exit, a signal)
            f"importing {names} ended the probe process (exit {proc.returncode}) before it could report"
            + (f":\n{tail}" if tail else "")
            + f"\n    fix: make `python -c 'import {packages[0]}'` run to the end (no os._exit or sys.exit at import)"
        )
    return Probed(tuple(placements), tuple(errors))


def pick_class(op: str) -> str:
    return next(
        (c for c in CLASS_PREFERENCE if op in CLASSES[c].ops),
        next(c for c in CLASSES if op in CLASSES[c].ops),
    )


def contract_id(kernel: str, taken: set[str]) -> str:
    """An id validate accepts (ID_PATTERN: ASCII) for a kernel of any name: ``café_matmul`` -> ``cafe-matmul``."""
    module, _, name = kernel.rpartition(":")
    base = _ascii_id(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower().replace("_", "-"))
    cid = base
    if cid in taken:
        cid = _ascii_id(f"{module.rsplit('.', 1)[-1]}.{base}")
    n = 2
    while cid in taken:
        cid, n = f"{base}-{n}", n + 1
    taken.add(cid)
    return cid


def _ascii_id(text: str) -> str:
    """Accents dropped (NFKD), any other character outside ``[A-Za-z0-9._-]`` a dash, at most 90 characters
    (room for a ``-N`` suffix), starting with a letter or digit."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    cid = re.sub(r"[^A-Za-z0-9._-]+", "-", folded).lstrip("._-")[:90].rstrip("._-")
    return cid or "kernel"


def render_contracts(
    probed: Probed,
    packages: Sequence[str],
    project_name: str,
    paths: Sequence[str],
    features: frozenset[str] = frozenset(),
    today: dt.date | None = None,
) -> str:
    """The commented contracts file. ``features``: optional contract keys this kcgate has ("direction",
    "init")."""
    day = (today or dt.date.today()).isoformat()
    out = [
        f"# contracts.toml written by `kcgate init {' '.join(packages)}` on {day}.",
        "# One contract per kernel it could place: the op family (from the kernel's name, or by calling it",
        "# with each family's inputs), the dtypes it accepted, a class that fits and small shapes for a quick",
        "# first run. Review each one, then `kcgate run`, `kcgate baseline update` and commit.",
        "# Contract language: README.md (The contract language); every key: `kcgate schema contracts`.",
        "",
        tomlout.table(
            "[project]",
            {"name": project_name, "paths": list(paths), "baselines": "baselines", "results": "results"},
            {"paths": "added to sys.path to import the kernels"},
        ),
    ]
    taken: set[str] = set()
    for p in (p for p in probed.placements if p.op):
        out.append(_contract(p, contract_id(p.kernel, taken), features))
    unplaced = [p for p in probed.placements if not p.op]
    if unplaced or probed.package_errors:
        out.append("# Not placed: write these contracts by hand (see README, The contract language).")
        out += [f"# - {e}" for e in probed.package_errors]
        out += [f"# - {p.kernel} ({p.kind}): {p.reason}" for p in unplaced]
        out.append("")
    return "\n".join(out)


def _contract(p: Placement, cid: str, features: frozenset[str]) -> str:
    klass = pick_class(p.op)
    dtypes = [d for d in p.dtypes if d in FIRST_DTYPES] or list(p.dtypes[:1])
    also = [d for d in p.dtypes if d not in dtypes]
    keys: dict[str, Any] = {"id": cid, "class": klass, "kernel": p.kernel, "op": p.op, "dtypes": dtypes}
    notes = {
        "class": CLASS_NOTES.get(klass, ""),
        "op": "from the kernel's name" if p.by == "name" else "its output matched this family's oracle",
        "dtypes": "it accepted these"
        + (f"; it also accepts {', '.join(also)}" if also else "")
        + (f"; it refused {', '.join(d for d, _ in p.refused)}" if p.refused else ""),
    }
    if klass == "C-PRC-01":
        keys["accumulate"] = "float32"
        notes["accumulate"] = "the accumulator you promise"
    if p.out_dtype:
        keys["out_dtype"] = p.out_dtype
        notes["out_dtype"] = "the dtype it returned"
    keys["shapes"] = [list(p.shape)]
    notes["shapes"] = "small, for a quick first run; add the shapes you ship"
    if p.params:
        keys["params"] = dict(p.params)
        notes["params"] = "the kernel's own defaults, read from its signature"
    if p.call and "call" in features:
        keys["call"] = {"kwargs": dict(p.call)}
        notes["call"] = "its reduction axis: kcgate reduces the last one"
    if p.init and "init" in features:
        keys["init"] = dict(p.init)
        notes["init"] = "constructor arguments (guessed from their names)"
    if p.backward and "direction" in features:
        keys["direction"] = "both"
        notes["direction"] = "it has a backward: its gradients are checked too"
    head = f"# {p.kernel}: {p.kind}" + (f"\n# note: {p.note}" if p.note else "")
    return head + "\n" + tomlout.table("[[contract]]", keys, notes)


def features() -> frozenset[str]:
    """Optional contract keys this kcgate understands."""
    return frozenset(k for k in ("direction", "init", "call") if k in CONTRACT_FIELD)


# ---- the workflow files ------------------------------------------------------------------------


def templates_dir() -> Path:
    for cand in (
        Path(__file__).resolve().parent.parent / "templates",
        Path(__file__).resolve().parents[2] / "docs" / "templates",
    ):
        if (cand / "kcgate-run.yml").is_file():
            return cand
    raise UsageError("the workflow templates (docs/templates) are not in this installation of kcgate")


def parse_runner(text: str) -> tuple[str, list[str]]:
    """``nvidia-h100=self-hosted,linux,nvidia`` -> ("nvidia-h100", ["self-hosted", "linux", "nvidia"])."""
    name, _, labels = text.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not labels:
        raise UsageError(
            f"--runner {text!r}: write NAME=LABEL[,LABEL...], e.g. nvidia-h100=self-hosted,linux,nvidia"
        )
    return name, [lab.strip() for lab in labels.split(",") if lab.strip()]


# The templates' ``uses:`` line: the tag the first release creates (docs/github.md#releasing).
TEMPLATE_USES = re.compile(r"kcgate/kcgate@v0\.1\.0  # [^\n]*")


# A GitHub repository as ``owner/name``: an owner is letters, digits and inner hyphens; a name letters, digits,
# '.', '_' and '-', never "." or ".." (which would make ``uses:`` a relative path out of the repository).
REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/(?!\.{1,2}$)[A-Za-z0-9_.-]{1,100}")
_GIT_URL = re.compile(r"(?:https://|ssh://git@|git@)github\.com[/:]([^/:]+/[^/]+?)(?:\.git)?/?")


def check_repo(repo: str) -> str:
    """``--repo`` as given when it is an owner/name; else refused before any file is written."""
    if not REPO.fullmatch(repo):
        raise UsageError(
            f"--repo {repo[:80]!r}: not a GitHub owner/name (letters, digits, '-', and '.', '_' in the name); "
            "pass it as e.g. --repo acme/kernels"
        )
    return repo


def installed_action_ref(direct_url: str | None) -> str | None:
    """``owner/repo@SHA`` when this kcgate was installed from a GitHub git URL at a commit (pip's PEP 610
    ``direct_url.json``): a ref that exists today, for the written workflows' ``uses:``. Else None (a
    checkout, a wheel, PyPI): the templates' tag stays, with its comment."""
    return action_ref(direct_url)[0]


def action_ref(direct_url: str | None) -> tuple[str | None, str]:
    """The ref (or None) and, when a ``direct_url.json`` was there but not used, why (else "")."""
    if direct_url is None:
        return None, ""
    try:
        data = bounded.loads_json(direct_url)
    except (ValueError, bounded.Refused) as exc:
        return None, f"the installed kcgate's direct_url.json is not readable JSON ({str(exc)[:100]})"
    vcs = data.get("vcs_info") if isinstance(data, dict) else None
    if not isinstance(vcs, dict) or vcs.get("vcs") != "git":
        return None, ""
    commit, url = vcs.get("commit_id"), data.get("url")
    m = _GIT_URL.fullmatch(url) if isinstance(url, str) else None
    if m is None:
        return None, ""  # a local clone or another host: its commit may not be on GitHub
    if (
        not REPO.fullmatch(m.group(1))
        or not isinstance(commit, str)
        or not re.fullmatch(r"[0-9a-f]{40}", commit)
    ):
        return None, (
            f"the installed kcgate's direct_url.json names {str(url)[:80]!r} at {str(commit)[:50]!r}, "
            "not a GitHub owner/name at a 40-hex commit"
        )
    return f"{m.group(1)}@{commit}", ""


def installed_direct_url() -> str | None:
    """The installed kcgate's ``direct_url.json`` (absent for a PyPI install or a plain checkout)."""
    try:
        return importlib.metadata.distribution("kcgate").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None


def render_workflows(
    repo: str, runners: Sequence[tuple[str, list[str]]], src: Path, action: str | None = None
) -> dict[str, str]:
    """The two workflow files from the templates: the run matrix and the expected legs are the runners;
    ``action`` (``owner/repo@SHA``), when known, replaces the templates' release tag in every ``uses:``."""
    run = (src / "kcgate-run.yml").read_text(encoding="utf-8")
    report = (src / "kcgate-report.yml").read_text(encoding="utf-8")
    if action:
        pinned = f"{action}  # the commit this kcgate was installed from"
        run, report = (TEMPLATE_USES.sub(pinned, text) for text in (run, report))
    matrix = "".join(_leg(name, labels) for name, labels in runners)
    run = re.sub(
        r"(        include:\n(?:          #[^\n]*\n)*)(?:          [- ] [^\n]*\n)+",
        lambda m: m.group(1) + matrix,
        run,
        count=1,
    )
    names = ", ".join(n for n, _ in runners)
    report = re.sub(r"expect-runners: [^#\n]*", f"expect-runners: {names}  ", report, count=1)
    head = f"# Written by `kcgate init --github` for {repo if REPO.fullmatch(repo) else 'this repository'}.\n"
    return {"kcgate-run.yml": head + run, "kcgate-report.yml": head + report}


def _leg(name: str, labels: list[str]) -> str:
    """One matrix entry; a GitHub-hosted leg (a ``*-latest`` label) installs the CPU torch build first, a
    self-hosted one uses the runner's ``python`` (edit it to the interpreter that has your vendor's torch)."""
    hosted = any(label.endswith("-latest") for label in labels)
    return (
        f"          - runner: {name}\n            labels: [{', '.join(labels)}]\n            python: python\n"
        '            shard: ""  # or i/N to split this runner\'s contracts across N legs\n'
        f"            cpu-torch: {'true' if hosted else 'false'}\n"
    )


def repo_name(root: Path) -> str:
    """owner/name from the git remote ``origin``, else the directory's name."""
    try:
        url = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        url = ""
    m = re.search(r"[:/]([^/:]+/[^/]+?)(?:\.git)?$", url)
    return m.group(1) if m else root.resolve().name


def write_new(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# What a quick run's failure says about the draft, by the cause's kind (kcgate.vocab.causes): whether to fix
# the kernel or the contract, and which key. "raised" and an error are almost always a call the draft got wrong.
NEXT_STEP = {
    "integrity": "the kernel itself misbehaved: a finding about the kernel, not the draft",
    "precision": (
        "the kernel's error exceeds what the draft promises: a finding if the kernel should be this accurate; "
        "if not, promise less (`accumulate`, or another `class`)"
    ),
    "semantic": (
        "the output is not the op family's result: check `op`, and how `call` maps the family's inputs onto the "
        "kernel's arguments"
    ),
    "structural": "the error follows the shape (a tile, a tail, an overflow): a finding about the kernel",
    "call": (
        "the kernel could not be called as the draft says: check `call` (argument order), `init`, and that it "
        "accepts the `dtypes` and `shapes`"
    ),
}


def quick_run_advice(cases: Sequence[Any], contracts: str) -> list[str]:
    """One line per contract whose quick-run cases did not pass: its worst case's cause or message, and
    what that says to edit (``NEXT_STEP``); then how to rerun one contract."""
    worst: dict[str, Any] = {}
    for c in cases:
        if not c.ok and c.contract_id not in worst:
            worst[c.contract_id] = c
    lines = []
    for cid, c in worst.items():
        cause = c.signature.cause if c.signature else ""
        kind = (
            "call"
            if c.status == "error" or cause == "raised"
            else CAUSE[cause].kind
            if cause in CAUSE
            else ""
        )
        what = (c.signature.summary if c.signature else c.message.splitlines()[0] if c.message else c.status)[
            :200
        ]
        step = NEXT_STEP.get(kind, "read the case's message")
        lines.append(f"  {cid}: {c.status.upper()} {what}\n    -> {step}")
    if worst:
        lines.append(f"rerun one contract: kcgate run -c {contracts} -k {next(iter(worst))}")
    return lines
