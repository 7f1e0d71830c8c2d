"""C-CMP-02 check: the contract under every autotuning configuration (``params.configs``, each passed as
``config=``) plus the kernel's default; the worst configuration decides and is named.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from kcgate.engine.checks import Finding, verdict
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial
from kcgate.results.model import SEVERITY, Signature, Status


def check(ctx: CaseContext) -> Finding:
    configs: list[Any] = [None, *list(ctx.contract.param("configs"))]
    per_config: list[tuple[Any, list[Trial]]] = []
    for i, cfg in enumerate(configs):
        kw = {} if cfg is None else {"config": cfg}
        ts = [run_trial(ctx, salt=(i, j), call_kwargs=kw) for j in range(ctx.contract.protocol.trials)]
        per_config.append((cfg, ts))
    findings = [(cfg, verdict(ctx, ts)) for cfg, ts in per_config]
    cfg, worst = max(findings, key=_severity)
    if worst.status == Status.PASS:
        return worst
    name = "the default configuration" if cfg is None else f"config {json.dumps(cfg, sort_keys=True)}"
    sig = worst.signature
    if sig is not None:
        sig = Signature(sig.cause, f"{name}: {sig.summary}", sig.evidence + (("config", name),))
    return replace(worst, signature=sig, message=f"{name}: {worst.message}")


def _severity(item: tuple[Any, Finding]) -> tuple[int, float]:
    f = item[1]
    rank = SEVERITY.get(f.status, 3)
    b = f.metrics.budget_used
    return rank, float("inf") if b is None and f.status != Status.PASS else (b or 0.0)
