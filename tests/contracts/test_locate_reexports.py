"""validate warns only where a kernel name is really missing: re-exports, ``import *``, names bound in
``if``/``try`` blocks and compiled modules' ``.pyi`` stubs are followed, without importing anything.

Checked on every kernel name README.md and docs/ use (whose module is installed here), on the four torch
names a new user met with a warning, and on packages built here for each way a name can be re-exported.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kcgate.contracts.locate import locate, module_source
from tests.conftest import ROOT, imported, kcgate

_KERNEL = re.compile(r"[\"'`]([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*)[\"'`]")
ISSUE_NAMES = ("torch:matmul", "torch.nn:LayerNorm", "torch.nn:RMSNorm", "torch.nn:Linear")


def doc_kernel_names() -> list[str]:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    names = {m for p in texts for m in _KERNEL.findall(p.read_text(encoding="utf-8"))}
    return sorted(names | set(ISSUE_NAMES))


@pytest.mark.parametrize("target", doc_kernel_names())
def test_no_warning_on_a_kernel_name_the_docs_use(target: str) -> None:
    if module_source(target.split(":")[0], (ROOT,)) is None:
        pytest.skip(f"{target.split(':')[0]} is not installed here (an example name, or an optional package)")
    assert locate(target, (ROOT,)) is None


def test_the_docs_name_torch_kernels() -> None:
    assert {"torch:matmul", "torch.nn:LayerNorm", "torch.nn.functional:layer_norm"} <= set(doc_kernel_names())


def test_a_misspelt_name_still_warns() -> None:
    problem = locate("torch.nn:LayerNorn", ())
    assert problem is not None and "found no 'LayerNorn'" in problem[0]


def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_every_way_of_re_exporting_is_followed(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "reex/__init__.py": (
                "from .impl import *\nfrom reex.abs_impl import *\nfrom . import sub\n"
                "try:\n    from .fast import fused\nexcept ImportError:\n    fused = None\n"
                "if True:\n    from ._ext import compiled_op\n"
                "__all__ = ['promised']\n"
            ),
            "reex/impl.py": "__all__ = ['relu_kernel']\n\ndef relu_kernel(x):\n    return x\n",
            "reex/abs_impl.py": "class Norm:\n    pass\n",
            "reex/sub.py": "",
            "reex/_ext.pyi": "def compiled_op(x): ...\ndef stub_only(x): ...\n",
            "reex/nested/__init__.py": "from ..impl import *\n",
            "dyn.py": "def __getattr__(name):\n    return name\n",
        },
    )
    roots = (tmp_path,)
    for name in ("relu_kernel", "Norm", "sub", "fused", "compiled_op", "promised"):
        assert locate(f"reex:{name}", roots) is None, name
    assert locate("reex._ext:stub_only", roots) is None  # a compiled module's stub
    assert locate("reex.nested:relu_kernel", roots) is None  # a relative star import two levels up
    assert locate("dyn:anything", roots) is None  # a module __getattr__: the lookup cannot tell
    problem = locate("reex:relu_kernal", roots)
    assert problem is not None and "found no 'relu_kernal'" in problem[0]


def test_validate_of_the_issue_names_is_quiet_and_never_imports_torch(tmp_path: Path) -> None:
    blocks = [
        f'[[contract]]\nid = "k{i}"\nclass = "C-PRC-01"\nkernel = "{name}"\nop = "{op}"\n'
        for i, (name, op) in enumerate(zip(ISSUE_NAMES, ("matmul", "layernorm", "rmsnorm", "linear")))
    ]
    (tmp_path / "contracts.toml").write_text("\n".join(blocks))
    proc = kcgate("validate", str(tmp_path / "contracts.toml"), python_flags=("-X", "importtime"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "static lookup" not in proc.stdout + proc.stderr and "warning" not in proc.stdout.lower()
    assert not imported(proc, "torch"), imported(proc, "torch")[:3]
