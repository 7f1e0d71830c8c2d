"""C-CMP-01 on a real compiled kernel: torch.compile (inductor generates and builds C++ on the CPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow  # torch.compile builds C++

CONTRACT = """
[project]
paths = ["{root}"]

[[contract]]
id = "gelu-compiled"
class = "C-CMP-01"
op = "gelu"
kernel = "kcgate.kernels.calibration.c_cmp_01:compiled_good"
dtypes = ["float32"]
shapes = [[64, 1024]]
protocol = {{ seeds = 1, trials = 2 }}
"""


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="no C++ compiler")
def test_inductor_compiled_fusion_satisfies_its_contract(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(CONTRACT.format(root=ROOT))
    proc = kcgate(
        "run",
        "--contracts",
        str(f),
        "--results",
        str(tmp_path / "r.json"),
        "--timeout",
        "600",
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and "gelu-compiled" in proc.stdout
