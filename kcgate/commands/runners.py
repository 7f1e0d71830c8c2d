"""`kcgate runners`: which device backends this machine has, and the fingerprint each would record.

torch is imported inside the command only; without it the command exits 3 and says how to install it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from kcgate.commands._options import deprecated, device_option, emit, format_option, output_option
from kcgate.commands.diff import pick_format
from kcgate.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("runners")(runners)


def runners(
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
    as_json: bool = typer.Option(False, "--json", help="Deprecated: --format json.", hidden=True),
    require: Optional[str] = device_option(
        "--require", help="Exit 3 unless this backend (cpu, cuda, rocm, xpu, mps, npu) is detected."
    ),
) -> None:
    """List every device backend, whether it is detected here, and its fingerprint.

    Examples: kcgate runners; kcgate runners --require cuda --format json --output runners.json
    """
    if as_json:
        deprecated("--json", "--format json")
        fmt = "json"
    pick_format(fmt, {"console": 0, "json": 1})
    from kcgate.devices import BACKENDS, check_name, default_backend
    from kcgate.devices.base import import_torch

    if require:
        check_name(require)
    torch = import_torch()  # exits 3 with the fix when torch is missing
    rows = [describe(name, cls(torch)) for name, cls in BACKENDS.items()]
    default = default_backend(r["backend"] for r in rows if r["detected"])
    if fmt == "json":
        emit(render_json(rows, default), output)
    else:
        emit(
            render_text(rows, default), output, verdict=f"default backend: {default} (the best one detected)"
        )
    if require:
        check_required(rows, require, torch.__version__)


def check_required(rows: list[dict[str, Any]], name: str, torch_version: str) -> None:
    """The device the run asks for must be detected by this torch; say which torch and what was found."""
    row = next(r for r in rows if r["backend"] == name)
    if row["detected"] and not row["error"]:
        return
    found = ", ".join(r["backend"] for r in rows if r["detected"]) or "none"
    why = f" ({row['error']})" if row["error"] else ""
    raise UsageError(
        f"device {name} is not available to torch {torch_version} in {sys.executable}{why}; detected: {found}. "
        f"fix: install your vendor's torch build into this interpreter, or pick the device it has"
    )


def describe(name: str, backend: Any) -> dict[str, Any]:
    """One backend as data: detection, and the fingerprint where the device is present."""
    from kcgate.devices import VENDORS

    row: dict[str, Any] = {"backend": name, "vendor": VENDORS.get(name, ""), "detected": backend.available()}
    row["device"] = backend.device()
    row["fingerprint"] = None
    row["fingerprint_key"] = None
    row["error"] = ""
    if row["detected"]:
        try:
            getattr(backend, "configure", lambda: None)()  # a worker's settings: the key its results carry
            fp = backend.fingerprint()
            row["fingerprint"], row["fingerprint_key"] = fp.to_json(), fp.key()
        except Exception as exc:  # one broken stack must not hide the others; shown in the row
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def render_json(rows: list[dict[str, Any]], default: str) -> str:
    detected = [r["backend"] for r in rows if r["detected"]]
    doc = {"kind": "kcgate-runners", "detected": detected, "default": default, "backends": rows}
    return json.dumps(doc, indent=2, sort_keys=True)


def render_text(rows: list[dict[str, Any]], default: str) -> str:
    lines = [f"{'backend':<8} {'vendor':<8} {'detected':<9} device"]
    for r in rows:
        lines.append(
            f"{r['backend']:<8} {r['vendor']:<8} {'yes' if r['detected'] else 'no':<9} {_summary(r)}"
        )
    lines += ["", f"default backend: {default} (the best one detected)"]
    for r in rows:
        if r["fingerprint"]:
            lines += ["", f"{r['backend']} fingerprint (key {r['fingerprint_key']}):", *_fingerprint_lines(r)]
    return "\n".join(lines)


def _summary(row: dict[str, Any]) -> str:
    fp = row["fingerprint"]
    if row["error"]:
        return f"error: {row['error']}"
    if not fp:
        return "-"
    return " ".join(
        x for x in (fp["device"], f"[{fp['arch']}]" if fp["arch"] else "", f"torch {fp['torch']}") if x
    )


def _fingerprint_lines(row: dict[str, Any]) -> list[str]:
    fp = row["fingerprint"]
    fields = [f"  {k:<8} {fp[k] or '-'}" for k in ("vendor", "device", "arch", "driver", "runtime", "torch")]
    flags = [f"  flag {k} = {v}" for k, v in sorted(fp["flags"].items()) if v != ""]
    return fields + flags
