"""Floating-point format facts by dtype name (torch-free): unit roundoff, bits, limits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    name: str
    bits: int  # storage width
    p: int  # significand bits incl. the implicit bit (0 for integers)
    max: float
    kind: str = "float"  # float | int | bool

    @property
    def u(self) -> float:
        """Unit roundoff 2^-p (round to nearest)."""
        return 2.0**-self.p if self.p else 0.0

    @property
    def has_inf(self) -> bool:
        """Floats have ±inf except the "fn" (finite) and "fnuz" fp8 variants, which overflow to NaN or ±max."""
        return self.kind == "float" and not self.name.endswith(("fn", "fnuz"))


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("float64", 64, 53, 1.7976931348623157e308),
        Format("float32", 32, 24, 3.4028234663852886e38),
        Format("tfloat32", 32, 11, 3.4028234663852886e38),
        Format("float16", 16, 11, 65504.0),
        Format("bfloat16", 16, 8, 3.3895313892515355e38),
        Format("float8_e4m3fn", 8, 4, 448.0),
        Format("float8_e5m2", 8, 3, 57344.0),
        Format("int64", 64, 0, 9.2e18, "int"),
        Format("int32", 32, 0, 2147483647.0, "int"),
    )
}
ALIASES = {
    "fp64": "float64",
    "fp32": "float32",
    "tf32": "tfloat32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "double": "float64",
    "float": "float32",
}
# Dtypes tensors can have (tf32 is an accumulator/operand format inside matmul units, not a tensor dtype).
TENSOR_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
ACCUMULATORS = ("float64", "float32", "tfloat32", "float16", "bfloat16")


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def unit_roundoff(name: str) -> float:
    return FORMATS[canonical(name)].u


def low_precision(name: str) -> bool:
    """A float format of 11 significand bits or fewer (fp16, bf16, fp8): an error of a few units in the last
    place is a scale a reviewer can read. In fp32 and wider, ULPs count grid points too fine to mean anything
    beside the allowed error (an fp32 gradient within budget can be 10^8 ULP from the oracle near zero)."""
    f = FORMATS.get(canonical(name))
    return f is not None and f.kind == "float" and 0 < f.p <= 11
