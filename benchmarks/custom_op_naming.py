"""What `kcgate run` names the held-out custom ops' kernels (benchmarks/custom_ops_kernels.py), and the custom-op
norms with fp16 sums (tests/testing/kernels/norm_sums.py): per kernel, its cases' statuses and causes. The
correct kernels (the library's formulation and the fused one) must pass; the wrong variants and the fp16-sum
kernels show what each fault is named (issue 56: low-precision accumulation named in custom ops).

    python -m benchmarks.custom_op_naming [--seed 0] [--only rms_norm,poly_norm,...] [--dtypes float32,...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.custom_ops_kernels import ENTRIES  # noqa: E402

KMOD = "benchmarks.custom_ops_kernels"
RMOD = "benchmarks.custom_ops_refs"  # the library formulations under a second import string (the reference)
NMOD = "tests.testing.kernels.norm_sums"
NORM_SUMS = {  # id: (kernel, reference, inputs, shape, correct)
    "group_norm fp16 sums": ("group_norm_fp16_sums", "group_norm_ref", "group_inputs", [4, 8, 256], False),
    "group_norm fp32 sums": ("group_norm_fp32_sums", "group_norm_ref", "group_inputs", [4, 8, 256], True),
    "poly_norm fp16 sums": ("poly_norm_fp16_sums", "poly_norm_ref", "poly_inputs", [8, 1024], False),
    "poly_norm fp32 sums": ("poly_norm_fp32_sums", "poly_norm_ref", "poly_inputs", [8, 1024], True),
}


def _slug(cid: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in cid).strip("-")


def contracts(only: set[str], dtypes: list[str]) -> dict[str, tuple[str, bool]]:
    """contract id -> (its TOML table, whether its kernel is correct)."""
    out: dict[str, tuple[str, bool]] = {}
    dts = ", ".join(f'"{d}"' for d in dtypes)

    def table(cid: str, kernel: str, ref: str, gen: str, shapes: str, outputs: tuple[str, ...]) -> str:
        names = f"outputs = {json.dumps(list(outputs))}\n" if len(outputs) > 1 else ""
        return (
            f'[[contract]]\nid = "{_slug(cid)}"\nclass = "C-PRC-01"\nop = "custom"\nkernel = "{kernel}"\n'
            f'reference = "{ref}"\ninputs = "{gen}"\ndtypes = [{dts}]\nshapes = {shapes}\n{names}'
            "protocol = { seeds = 1 }\n"
        )

    for e in ENTRIES:
        if only and e.name not in only:
            continue
        shapes = json.dumps([list(s) for s in e.shapes])
        ref, gen = f"{RMOD}:{e.kernel.__name__}", f"{KMOD}:{e.inputs.__name__}"
        kernels = {"library": (e.kernel, True), **({"fused": (e.fused, True)} if e.fused else {})}
        kernels.update({w: (fn, False) for w, fn in e.wrong.items()})
        for label, (fn, ok) in kernels.items():
            cid = f"{e.name}: {label}"
            out[cid] = (table(cid, f"{KMOD}:{fn.__name__}", ref, gen, shapes, e.outputs), ok)
    for cid, (k, r, g, shape, ok) in NORM_SUMS.items():
        if only and cid.split()[0] not in only:
            continue
        out[cid] = (table(cid, f"{NMOD}:{k}", f"{NMOD}:{r}", f"{NMOD}:{g}", json.dumps([shape]), ()), ok)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", default="0")
    p.add_argument("--only", default="")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    a = p.parse_args()
    only = {s for s in a.only.split(",") if s}
    found = contracts(only, a.dtypes.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "contracts.toml"
        f.write_text(f'[project]\npaths = ["{ROOT}"]\n\n' + "\n".join(t for t, _ in found.values()))
        res = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "kcgate", "run", "-c", str(f), "--results", str(res), "--seed", a.seed]
        subprocess.run([*cmd, "--shrink-s", "0", "-q"], cwd=tmp, check=False)
        doc = json.loads(res.read_text())
    cases = [dict(zip(doc["case_fields"], c)) for c in doc["cases"]]
    false_alarms = 0
    for cid, (_, ok) in found.items():
        mine = [c for c in cases if c["contract_id"] == _slug(cid) and c["status"] != "refused"]
        tally = Counter(
            c["status"]
            if c["status"] == "pass"
            else f"{c['status']} {(c.get('signature') or {}).get('cause', '')}"
            for c in mine
        )
        false_alarms += sum(1 for c in mine if ok and c["status"] != "pass")
        print(f"{cid:45s} {'correct' if ok else 'faulty ':8s} {dict(sorted(tally.items()))}")
    print(f"false alarms (correct kernels not passing): {false_alarms}")


if __name__ == "__main__":
    main()
