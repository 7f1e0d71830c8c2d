"""`kcgate init` on a scratch kernel package (tests/testing/kernels/scratchpkg): nothing edited by hand."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kcgate.adopt import scaffold
from kcgate.contracts.load import load_project
from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow  # end to end: every test runs kcgate in subprocesses

PKG = "tests.testing.kernels.scratchpkg"
KERNELS = f"{PKG}.kernels"


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("init")
    proc = kcgate("init", PKG, "--path", str(ROOT), "--github", "--repo", "acme/kernels", cwd=root)
    assert proc.returncode == 1, (
        proc.stdout + proc.stderr
    )  # its quick run fails the broken kernel: so does init
    return root, proc.stdout


def test_init_writes_a_file_that_validates_and_whose_run_fails_only_the_broken_kernel(
    initialised: tuple[Path, str],
) -> None:
    root, out = initialised
    project = load_project(root / "contracts.toml")
    ops = {c.kernel.split(":")[1]: c.op for c in project.contracts}
    assert ops["matmul"] == "matmul" and ops["softmax"] == "softmax"
    assert ops["fast_layer_norm"] == "layernorm" and ops["activation"] == "silu"  # by name / by probing
    assert "validate: contracts.toml OK" in out
    statuses: dict[str, set[str]] = {}
    for status, case in re.findall(r"^(PASS|FAIL|ERROR|REFUSED)\s+(\S+)", out, re.M):
        statuses.setdefault(case.split("/")[0], set()).add(status)
    assert statuses.pop("fast-layer-norm") == {"FAIL"}
    assert statuses and all(s == {"PASS"} for s in statuses.values()), statuses
    # an autograd.Function and an nn.Module, called as they ship (kcgate.engine.invoke)
    assert ops["RMSNormFunction"] == "rmsnorm" and ops["RotaryEmbedding"] == "rope"
    assert {"rmsnorm-function", "rotary-embedding", "matmul", "softmax", "activation"} == set(statuses)
    assert "not placed" not in out


def test_inits_hint_follows_its_quick_run(initialised: tuple[Path, str]) -> None:
    """The failing contract is named with its cause and what that says to edit, and how to rerun it."""
    out = initialised[1]
    assert "the quick run did not pass (exit 1)" in out
    hint = out.split("the quick run did not pass", 1)[1]
    assert "fast-layer-norm: FAIL" in hint and "promise less (`accumulate`, or another `class`)" in hint
    assert "rerun one contract: kcgate run -c contracts.toml -k fast-layer-norm" in hint
    assert "matmul:" not in hint  # only the contracts that did not pass
    assert "edit its class, dtypes or tolerance" not in out
    # the quick run's results file is temporary: not named
    assert "results: " not in out and "kcgate-init-" not in out


def test_init_comments_the_file_and_marks_backward(initialised: tuple[Path, str]) -> None:
    text = (initialised[0] / "contracts.toml").read_text()
    assert text.startswith(f"# contracts.toml written by `kcgate init {PKG}`")
    block = text[text.index(f'kernel = "{KERNELS}:matmul"') :].split("[[contract]]")[0]
    assert 'direction = "both"  # it has a backward' in block
    assert "_helper" not in text


def test_init_never_overwrites_without_force(initialised: tuple[Path, str]) -> None:
    root, _ = initialised
    before = (root / "contracts.toml").read_text()
    proc = kcgate("init", PKG, "--path", str(ROOT), "--no-run", cwd=root)
    assert proc.returncode == 3 and "exists; pass --force" in proc.stderr
    assert (root / "contracts.toml").read_text() == before


def test_init_writes_the_workflows_with_the_runners(initialised: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = initialised
    run = (root / ".github/workflows/kcgate-run.yml").read_text()
    assert run.startswith("# Written by `kcgate init --github` for acme/kernels.")
    assert "- runner: cpu-ubuntu\n            labels: [ubuntu-latest]\n            python: python\n" in run
    assert "nvidia-h100" not in run
    files = scaffold.render_workflows(
        "acme/k",
        [("nvidia-h100", ["self-hosted", "nvidia"]), ("cpu", ["ubuntu-latest"])],
        scaffold.templates_dir(),
    )
    assert "expect-runners: nvidia-h100, cpu" in files["kcgate-report.yml"]
    assert "labels: [self-hosted, nvidia]" in files["kcgate-run.yml"]
    import yaml

    assert yaml.safe_load(files["kcgate-run.yml"])["jobs"]["contracts"]["strategy"]["matrix"]["include"] == [
        {
            "runner": "nvidia-h100",
            "labels": ["self-hosted", "nvidia"],
            "python": "python",
            "shard": "",
            "cpu-torch": False,
        },
        {"runner": "cpu", "labels": ["ubuntu-latest"], "python": "python", "shard": "", "cpu-torch": True},
    ]


def test_a_package_that_does_not_import_is_reported(tmp_path: Path) -> None:
    proc = kcgate("init", "no_such_kernels_pkg", "--no-run", cwd=tmp_path)
    assert proc.returncode == 5
    assert "cannot import no_such_kernels_pkg: ModuleNotFoundError" in proc.stdout
    assert not (tmp_path / "contracts.toml").exists()


def test_the_written_workflows_pass_actionlint(initialised: tuple[Path, str]) -> None:
    from tests.test_action import _tool

    files = sorted(str(p) for p in (initialised[0] / ".github" / "workflows").glob("*.yml"))
    proc = subprocess.run(
        [_tool("actionlint"), "-no-color", *files], capture_output=True, text=True, timeout=300
    )
    assert len(files) == 2 and proc.returncode == 0, proc.stdout + proc.stderr


def test_names_and_constructor_arguments_are_read_as_a_user_writes_them() -> None:
    import torch

    from kcgate.adopt import probe

    assert [
        probe.family_by_name(n) for n in ("RMSNormFunction", "fused_rms_norm", "GemmKernel", "summary")
    ] == [
        "rmsnorm",
        "rmsnorm",
        "matmul",
        None,  # 'sum' only as a whole word
    ]
    assert probe.family_by_name("RotaryEmbedding") == "rope" and probe.family_by_name("flash_attn") == "sdpa"

    class LlamaRMSNorm(torch.nn.Module):
        def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden_size))

    class Opaque(torch.nn.Module):
        def __init__(self, config: object) -> None:
            super().__init__()

    assert probe.module_init(LlamaRMSNorm, "rmsnorm") == {"hidden_size": "{n}"}
    assert probe.module_init(Opaque, "rmsnorm") is None
    placed = scaffold.Placement(
        kernel="m:LlamaRMSNorm", kind="nn.Module", op="rmsnorm", by="name", dtypes=("float32", "float16"),
        shape=(16, 512), init=(("hidden_size", "{n}"),),
    )  # fmt: skip
    text = scaffold.render_contracts(scaffold.Probed((placed,)), ["m"], "p", ["."], scaffold.features())
    assert 'init = { hidden_size = "{n}" }' in text
    assert 'dtypes = ["float32"]  # it accepted these; it also accepts float16' in text


def test_init_reads_a_kernels_eps_into_the_contract_and_its_quick_run_passes(tmp_path: Path) -> None:
    """An eps = 1e-6 RMSNorm (a function and transformers' LlamaRMSNorm): init writes params.eps = 1e-6 from
    the signature (at the family default 1e-5 the fp32 cases failed, error 80-100x torch's); a softmax whose
    dim has no default gets call = { kwargs = { dim = -1 } }."""
    proc = kcgate("init", "tests.testing.kernels.scratchnorm", "--path", str(ROOT), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    project = load_project(tmp_path / "contracts.toml")
    assert {c.kernel.split(":")[1]: dict(c.params).get("eps") for c in project.contracts} == {
        "rms_norm": 1e-6,
        "LlamaRMSNorm": 1e-6,
        "softmax": None,
    }
    (softmax,) = [c for c in project.contracts if c.op == "softmax"]
    assert dict(softmax.call_kwargs) == {"dim": -1}  # its axis had no default: the last one
    cases = [ln for ln in proc.stdout.splitlines() if ln.startswith(("PASS", "FAIL", "ERROR", "REFUSED"))]
    assert len(cases) == 18  # 12 declared cases and a boundary shape per contract and dtype
    assert all(ln.startswith("PASS") for ln in cases if "/float32/" in ln), cases  # failed at eps 1e-5
    if "all contracts hold" not in proc.stdout:
        # the quick run draws a fresh seed: bf16 LlamaRMSNorm fails the sensitivity gate by chance at 1.51x on
        # about 1 run in 3 (issue 32 lists it; part A reworks the gate), with params.eps right or not
        assert all("a correct implementation's" in ln for ln in cases if not ln.startswith("PASS")), cases
        pytest.xfail("bf16 LlamaRMSNorm's sensitivity-gate chance failure (issue 32 part A)")


def test_a_kernels_defaults_are_read_from_its_signature() -> None:
    import torch

    from kcgate.adopt import probe

    class Norm(torch.nn.Module):
        def __init__(
            self, hidden_size: int, variance_epsilon: float = 1e-12, elementwise: bool = True
        ) -> None:
            super().__init__()

    def layer_norm(x, w, b, eps=1e-6):  # type: ignore[no-untyped-def]
        return x

    def softmax(x, dim=-1):  # type: ignore[no-untyped-def]
        return x

    assert probe.defaults(Norm, "layernorm") == {"eps": 1e-12}
    assert probe.defaults(layer_norm, "rmsnorm") == {"eps": 1e-6}
    assert probe.defaults(layer_norm, "softmax") == {}  # softmax takes no eps
    assert probe.defaults(softmax, "softmax") == {}

    def softmax_axis(x, dim):  # type: ignore[no-untyped-def]
        return x

    def softmax_first(x, axis=0):  # type: ignore[no-untyped-def]
        return x

    assert probe.row_axis(softmax_axis, "softmax") == {"dim": -1}
    assert probe.row_axis(softmax_first, "layernorm") == {"axis": -1}
    assert probe.row_axis(softmax, "softmax") == {}  # already the last axis
    assert probe.row_axis(softmax_axis, "matmul") == {}  # not a row family
