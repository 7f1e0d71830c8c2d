"""The frozen records a contracts.toml becomes: ``Project``, ``Contract`` (the paper's eight parts, class
defaults applied), ``Tolerance`` and ``Protocol``, each with a JSON round trip for the worker.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcgate.contracts.fields import (
    CONTRACT_FIELD,
    EXCESS_FACTOR,
    FREIVALDS_VECTORS,
    RELATIVE_FACTOR,
)
from kcgate.contracts.policy import Policy
from kcgate.errors import Problem
from kcgate.util.frozen_json import encode
from kcgate.vocab.catalogue import params_of
from kcgate.vocab.classes import CLASSES


@dataclass(frozen=True)
class Tolerance:
    method: str = CONTRACT_FIELD["tolerance"].field("method").default
    lam: float = (
        CONTRACT_FIELD["tolerance"].field("lambda").default
    )  # λ of the probabilistic bound (FACTS.md: a practical gate uses 8)
    ulp: float = CONTRACT_FIELD["tolerance"].field("ulp").default
    rtol: float = CONTRACT_FIELD["tolerance"].field("rtol").default
    atol: float = CONTRACT_FIELD["tolerance"].field("atol").default
    factor: float = RELATIVE_FACTOR  # method "relative": allowed error / the baseline's error
    baseline: str = ""  # method "relative" (and the sensitivity gate's reference): "" = the composite
    excess: float = EXCESS_FACTOR  # the sensitivity gate's factor; 0 = off (excess = false)
    excess_reference: str = "composite"  # the gate's floor: the composite's error, or "sequential"'s model


@dataclass(frozen=True)
class Protocol:
    seeds: int = 2  # the class's, when the contract does not say (kcgate.vocab.classes)
    trials: int = 2
    poison: bool = CONTRACT_FIELD["protocol"].field("poison").default
    guard: int = CONTRACT_FIELD["protocol"].field("guard").default
    timeout_s: float = CONTRACT_FIELD["protocol"].field("timeout_s").default
    k_sweep: tuple[int, ...] = ()
    freivalds_vectors: int = FREIVALDS_VECTORS  # random vectors per Freivalds check (docs/freivalds.md)
    held_out: int | None = None  # C-CMP-03's held-out shapes per seed; None: params.held_out (the class's)
    boundary: bool = CONTRACT_FIELD["protocol"].field("boundary").default  # kcgate.plan.boundary_shapes
    probes: bool = CONTRACT_FIELD["protocol"].field("probes").default  # kcgate.engine.checks.stability
    fresh: int = CONTRACT_FIELD["protocol"].field("fresh").default  # kcgate.plan.replay: /f cases


@dataclass(frozen=True)
class Contract:
    """The paper's eight parts, with class defaults already applied."""

    id: str  # 1 identifier
    klass: str
    kernel: str  # 2 scope
    op: str
    description: str = ""
    devices: tuple[str, ...] = CONTRACT_FIELD["devices"].choices
    dtypes: tuple[str, ...] = ("float32",)  # 3 precondition
    accumulate: str = "float32"
    out_dtype: str = ""  # "" = same as the input dtype
    shapes: tuple[tuple[int, ...], ...] = ()
    distribution: str = "normal"
    layout: str = "contiguous"
    postcondition: str = "within-bound"  # 4
    tolerance: Tolerance = field(default_factory=Tolerance)  # 5
    oracle: str = "fp64"  # 6
    reference: str = ""
    inputs: str = ""
    protocol: Protocol = field(default_factory=Protocol)  # 7
    signature: tuple[str, ...] = ()  # 8 (causes to test for; () = the class's)
    params: tuple[tuple[str, Any], ...] = ()
    call: str = "return"
    good: str = ""
    bad: str = ""
    baseline: str = ""
    direction: str = "forward"  # forward | backward (every input gradient) | both
    # (dim index, constraint) pairs every drawn shape respects (grammar: kcgate.contracts.shape_class)
    shape_constraints: tuple[tuple[int, str], ...] = ()
    shape_class: tuple[tuple[int, str], ...] = ()  # C-CMP-03: the class held-out shapes are drawn from
    max_elements: int = 0  # C-CMP-03: cap on a held-out shape's product of dims (0: shape_class.MAX_ELEMENTS)
    # call = { args, kwargs }: the kernel's signature in terms of the family's inputs ("x", "w") and the
    # trial's sizes ("{n}"); None = the family's positional convention. Lists are stored as tuples.
    call_args: tuple[Any, ...] | None = None
    call_kwargs: tuple[tuple[str, Any], ...] = ()
    init: tuple[tuple[str, Any], ...] = ()  # constructor kwargs when the kernel is an nn.Module class
    env: tuple[tuple[str, str], ...] = ()  # set in the worker before the kernel is imported
    mutates: tuple[str, ...] = ()  # inputs (by name) the kernel overwrites by design
    no_grad: tuple[str, ...] = ()  # inputs (by name) that take no gradient (a loss's target, a mask)
    outputs: tuple[str, ...] = ()  # names of a tuple result's outputs, in order (kcgate.numerics.outputs)
    # custom ops: input name -> its declared stability probes ((kind, magnitude), ...); () turns off the
    # probes kcgate infers for that input (kcgate.engine.checks.stability)
    stability: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    line: int | None = None
    # the file the contract is declared in, relative to the contracts file's directory, when it is not the
    # contracts file itself (a @kcgate.contract in a .py, found through [project].discover); line is that file's
    source: str = ""

    @property
    def forward(self) -> bool:
        return self.direction in ("forward", "both")

    @property
    def backward(self) -> bool:
        return self.direction in ("backward", "both")

    def param(self, name: str) -> Any:
        values = dict(self.params)
        if name in values:
            return values[name]
        spec = CLASSES[self.klass].params.get(name) or params_of(self.op)[name]
        return spec.default

    def op_params(self) -> dict[str, Any]:
        """The values of the family's own parameters given in ``params`` (the rest take their defaults)."""
        own = params_of(self.op)
        return {k: v for k, v in self.params if k in own}

    def to_json(self) -> dict[str, Any]:
        """The fields that differ from their defaults, as JSON data (``kcgate mutate``'s cache key)."""
        return encode(self)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Project:
    path: Path
    name: str
    contracts: tuple[Contract, ...]
    policy: Policy
    paths: tuple[Path, ...] = ()
    baselines_dir: Path | None = None
    results_dir: Path = Path("results")
    track: tuple[str, ...] = ()  # [project] track: distributions whose versions a run records
    warnings: tuple[Problem, ...] = ()  # valid, but worth saying (e.g. a kernel the static lookup cannot see)

    @property
    def import_paths(self) -> tuple[Path, ...]:
        """Where a run imports the kernels, references and generators from: [project].paths, then the contracts
        file's directory (as validate looks them up), ahead of the working directory. A base rerun
        (``--base-ref``) thus imports base's modules from its worktree, never the PR's checkout it runs in."""
        return (*self.paths, self.path.absolute().parent)

    def contract(self, contract_id: str) -> Contract:
        """The contract with this id (a KeyError names an unknown one)."""
        return self._by_id[contract_id]

    @functools.cached_property
    def _by_id(self) -> dict[str, Contract]:
        """Contracts by id, built on first lookup (a run looks one up per case, in parent and worker)."""
        return {c.id: c for c in self.contracts}
