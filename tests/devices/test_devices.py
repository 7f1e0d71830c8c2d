"""Device backends through fake torch modules, `kcgate runners` as a subprocess, runner profiles.

Only the CPU backend runs against real hardware here; every GPU backend is checked against
SimpleNamespace fakes shaped like the documented torch / torch_npu APIs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import kcgate.cli  # noqa: F401  (import before a command module: cli.py registers commands on import)
from kcgate.commands.runners import describe, render_text
from kcgate.contracts.fields import CONTRACT_FIELD
from kcgate.devices import BACKENDS, VENDORS, default_backend, detect, get_backend
from kcgate.devices.cpu import CpuBackend
from kcgate.devices.cuda import CudaBackend, sm_arch
from kcgate.devices.mps import MpsBackend
from kcgate.devices.npu import NpuBackend
from kcgate.devices.rocm import RocmBackend
from kcgate.devices.xpu import XpuBackend
from kcgate.errors import UsageError
from kcgate.results.model import Fingerprint

ROOT = Path(__file__).resolve().parents[2]
ACCELERATORS = ("cuda", "rocm", "xpu", "mps", "npu")


# ---- fakes -------------------------------------------------------------------------------------


def _recorder(calls: list[str], name: str) -> Any:
    return lambda *a: calls.append(name)


def fake_torch(*, cuda: bool = False, hip: str | None = None, xpu: bool = False, mps: bool = False) -> Any:
    """A torch module shaped like the documented API, with one accelerator switched on or none."""
    calls: list[str] = []
    matmul = SimpleNamespace(
        allow_tf32=False,
        allow_fp16_reduced_precision_reduction=True,
        allow_bf16_reduced_precision_reduction=False,
    )
    backends = SimpleNamespace(
        cuda=SimpleNamespace(matmul=matmul, preferred_blas_library=lambda: "cublas"),
        cudnn=SimpleNamespace(allow_tf32=True, deterministic=False, benchmark=False, version=lambda: 90100),
        cpu=SimpleNamespace(get_cpu_capability=lambda: "AVX2"),
        mkldnn=SimpleNamespace(enabled=True, fp32_precision="ieee"),
        mkl=SimpleNamespace(is_available=lambda: True),
        mps=SimpleNamespace(
            is_available=lambda: mps, get_name=lambda: "Apple M4 Pro", get_core_count=lambda: 20
        ),
    )
    gpu_props = SimpleNamespace(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-")
    xpu_props = SimpleNamespace(
        name="Intel(R) Data Center GPU Max 1550",
        driver_version="1.3.30049",
        version="12.60.7",
        architecture=21479031808,
        platform_name="Intel(R) oneAPI Unified Runtime over Level-Zero",
        has_fp64=True,
        has_fp16=True,
        has_subgroup_matrix_multiply_accumulate=True,
        has_subgroup_matrix_multiply_accumulate_tensor_float32=True,
    )
    return SimpleNamespace(
        __version__="2.6.0",
        calls=calls,
        version=SimpleNamespace(cuda=None if hip else "12.4", hip=hip, xpu="20250001" if xpu else None),
        get_float32_matmul_precision=lambda: "highest",
        are_deterministic_algorithms_enabled=lambda: False,
        get_num_threads=lambda: 4,
        backends=backends,
        cuda=SimpleNamespace(
            is_available=lambda: cuda,
            device_count=lambda: 1 if cuda else 0,
            get_device_name=lambda i=0: "AMD Instinct MI300X" if hip else "NVIDIA H100 80GB HBM3",
            get_device_capability=lambda i=0: (9, 4) if hip else (9, 0),
            get_device_properties=lambda i=0: gpu_props,
            synchronize=_recorder(calls, "cuda.synchronize"),
            empty_cache=_recorder(calls, "cuda.empty_cache"),
        ),
        xpu=SimpleNamespace(
            is_available=lambda: xpu,
            device_count=lambda: 1,
            get_device_properties=lambda i=0: xpu_props,
            synchronize=_recorder(calls, "xpu.synchronize"),
            empty_cache=_recorder(calls, "xpu.empty_cache"),
        ),
        mps=SimpleNamespace(
            synchronize=_recorder(calls, "mps.synchronize"), empty_cache=_recorder(calls, "mps.empty_cache")
        ),
    )


def fake_torch_npu(*, available: bool = True) -> Any:
    calls: list[str] = []
    versions = {"CANN": "8.1.RC1", "DRIVER": "24.1.0"}
    return SimpleNamespace(
        __version__="2.6.0.post1",
        calls=calls,
        npu=SimpleNamespace(
            is_available=lambda: available,
            get_device_name=lambda i=0: "Ascend910B2",
            matmul=SimpleNamespace(allow_hf32=False),
            conv=SimpleNamespace(allow_hf32=True),
            synchronize=_recorder(calls, "npu.synchronize"),
            empty_cache=_recorder(calls, "npu.empty_cache"),
        ),
        utils=SimpleNamespace(get_cann_version=lambda module="CANN": versions.get(module, "")),
    )


def make(name: str, torch: Any, npu: Any = None) -> Any:
    if name == "npu":
        return NpuBackend(torch, npu if npu is not None else fake_torch_npu(available=False))
    return BACKENDS[name](torch)


# ---- availability ------------------------------------------------------------------------------


def test_cuda_build_with_gpu_is_cuda_not_rocm() -> None:
    torch = fake_torch(cuda=True)
    assert CudaBackend(torch).available()
    assert not RocmBackend(torch).available()


def test_rocm_build_with_gpu_is_rocm_not_cuda() -> None:
    torch = fake_torch(cuda=True, hip="6.2.41133")
    assert RocmBackend(torch).available()
    assert not CudaBackend(torch).available()
    assert RocmBackend(torch).device() == "cuda"  # ROCm torch reuses the CUDA device type


@pytest.mark.parametrize("hip", [None, "6.2.41133"])
def test_no_gpu_means_neither_cuda_nor_rocm(hip: str | None) -> None:
    torch = fake_torch(cuda=False, hip=hip)
    assert not CudaBackend(torch).available()
    assert not RocmBackend(torch).available()


def test_xpu_and_mps_follow_their_is_available() -> None:
    assert XpuBackend(fake_torch(xpu=True)).available()
    assert not XpuBackend(fake_torch()).available()
    assert MpsBackend(fake_torch(mps=True)).available()
    assert not MpsBackend(fake_torch()).available()


def test_npu_follows_torch_npu() -> None:
    torch = fake_torch()
    assert NpuBackend(torch, fake_torch_npu(available=True)).available()
    assert not NpuBackend(torch, fake_torch_npu(available=False)).available()


def test_npu_without_torch_npu_installed_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # makes `import torch_npu` raise ImportError
    assert not NpuBackend(fake_torch()).available()


def test_is_available_that_raises_means_unavailable() -> None:
    torch = fake_torch()
    torch.cuda.is_available = lambda: (_ for _ in ()).throw(RuntimeError("driver too old"))
    assert not CudaBackend(torch).available()


@pytest.mark.parametrize("name", list(BACKENDS))
def test_bare_torch_without_any_api_degrades(name: str) -> None:
    """An old or stripped torch: no accelerator detected, fingerprint fields "" rather than a crash."""
    bare = SimpleNamespace(__version__="1.13.0")
    backend = make(name, bare, SimpleNamespace())
    assert backend.available() is (name == "cpu")
    fp = backend.fingerprint()
    assert fp.backend == name and fp.torch == "1.13.0"
    assert fp.arch in ("", "x86_64", "aarch64", "arm64", "AMD64") and fp.driver == ""
    assert all(isinstance(v, str) for _, v in fp.flags)


# ---- fingerprints ------------------------------------------------------------------------------


def test_cuda_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    fp = CudaBackend(fake_torch(cuda=True)).fingerprint()
    flags = dict(fp.flags)
    assert (fp.vendor, fp.device, fp.arch) == ("NVIDIA", "NVIDIA H100 80GB HBM3", "sm_90")
    assert (fp.runtime, fp.driver, fp.torch) == ("12.4", "", "2.6.0")
    assert flags["cuda_matmul_allow_tf32"] == "False" and flags["cudnn_allow_tf32"] == "True"
    assert flags["cuda_matmul_allow_fp16_reduced_precision_reduction"] == "True"
    assert flags["cuda_matmul_allow_bf16_reduced_precision_reduction"] == "False"
    assert flags["cuda_matmul_fp32_precision"] == ""  # an API this torch lacks reads as ""
    assert flags["cudnn_version"] == "90100" and flags["preferred_blas_library"] == "cublas"
    assert flags["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and flags["CUDA_VISIBLE_DEVICES"] == "3"
    assert flags["matmul_precision"] == "highest" and flags["deterministic"] == "False"


def test_rocm_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    fp = RocmBackend(fake_torch(cuda=True, hip="6.2.41133")).fingerprint()
    flags = dict(fp.flags)
    assert (fp.vendor, fp.device, fp.arch, fp.runtime) == (
        "AMD",
        "AMD Instinct MI300X",
        "gfx942",
        "6.2.41133",
    )
    assert flags["gcn_arch_name"] == "gfx942:sramecc+:xnack-"
    assert flags["HIP_VISIBLE_DEVICES"] == "1" and flags["miopen_version"] == "90100"
    assert "cuda_matmul_allow_tf32" in flags  # same torch.backends.cuda flags apply on ROCm


def test_xpu_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0.1")
    fp = XpuBackend(fake_torch(xpu=True)).fingerprint()
    flags = dict(fp.flags)
    assert (fp.vendor, fp.device) == ("Intel", "Intel(R) Data Center GPU Max 1550")
    assert (fp.arch, fp.driver, fp.runtime) == ("21479031808", "1.3.30049", "20250001")
    assert flags["xpu_has_fp64"] == "True" and flags["xpu_has_dpas_tf32"] == "True"
    assert flags["mkldnn_fp32_precision"] == "ieee" and flags["ZE_AFFINITY_MASK"] == "0.1"


def test_mps_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "0")
    fp = MpsBackend(fake_torch(mps=True)).fingerprint()
    flags = dict(fp.flags)
    assert (fp.vendor, fp.device, fp.arch, fp.driver) == ("Apple", "Apple M4 Pro", "", "")
    assert flags["PYTORCH_ENABLE_MPS_FALLBACK"] == "0" and flags["mps_core_count"] == "20"


def test_npu_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    fp = NpuBackend(fake_torch(), fake_torch_npu()).fingerprint()
    flags = dict(fp.flags)
    assert (fp.vendor, fp.device, fp.driver, fp.runtime) == ("Huawei", "Ascend910B2", "24.1.0", "8.1.RC1")
    assert flags["npu_conv_allow_hf32"] == "True" and flags["npu_matmul_allow_hf32"] == "False"
    assert flags["torch_npu"] == "2.6.0.post1" and flags["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"


def test_cpu_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    flags = dict(CpuBackend(fake_torch()).fingerprint().flags)
    assert flags["cpu_capability"] == "AVX2" and flags["ATEN_CPU_CAPABILITY"] == "avx2"
    assert flags["threads"] == "4" and flags["mkldnn_fp32_precision"] == "ieee"


def test_getter_that_raises_reads_as_empty() -> None:
    torch = fake_torch(cuda=True)
    torch.cuda.get_device_name = lambda i=0: (_ for _ in ()).throw(RuntimeError("no device"))
    torch.cuda.get_device_capability = lambda i=0: None
    fp = CudaBackend(torch).fingerprint()
    assert fp.device == "" and fp.arch == ""


@pytest.mark.parametrize(("cap", "arch"), [((8, 6), "sm_86"), ((10, 0), "sm_100"), (None, ""), ((9,), "")])
def test_sm_arch(cap: Any, arch: str) -> None:
    torch = SimpleNamespace(cuda=SimpleNamespace(get_device_capability=lambda i=0: cap))
    assert sm_arch(torch) == arch


def test_fingerprint_round_trips_and_changes_key_with_tf32() -> None:
    torch = fake_torch(cuda=True)
    fp = CudaBackend(torch).fingerprint()
    assert Fingerprint.from_json(json.loads(json.dumps(fp.to_json()))) == fp
    torch.backends.cuda.matmul.allow_tf32 = True
    assert CudaBackend(torch).fingerprint().key() != fp.key()


# ---- sync and cleanup go to the vendor module ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "module"), [("cuda", "cuda"), ("rocm", "cuda"), ("xpu", "xpu"), ("mps", "mps"), ("npu", "npu")]
)
def test_synchronize_and_empty_cache(name: str, module: str) -> None:
    torch, npu = fake_torch(), fake_torch_npu()
    backend = make(name, torch, npu)
    backend.synchronize()
    backend.empty_cache()
    calls = npu.calls if name == "npu" else torch.calls
    assert calls == [f"{module}.synchronize", f"{module}.empty_cache"]


# ---- registry, detect, default -----------------------------------------------------------------


def test_registry_is_complete_and_ordered() -> None:
    assert list(BACKENDS) == [*ACCELERATORS, "cpu"]  # preference order: cpu last
    assert set(VENDORS) == set(BACKENDS)
    assert all(cls.name == name for name, cls in BACKENDS.items())


def test_contract_device_names_match_the_registry() -> None:
    assert set(CONTRACT_FIELD["devices"].choices) == set(BACKENDS)


def test_detect_and_default_prefer_an_accelerator() -> None:
    torch = fake_torch(cuda=True, hip="6.2.41133")
    found = detect([make(name, torch) for name in BACKENDS])
    assert found == ["rocm", "cpu"]
    assert default_backend(found) == "rocm"
    assert default_backend(["cpu"]) == "cpu"
    assert default_backend(["cpu", "mps"]) == "mps"
    assert default_backend([]) == "cpu"


def test_get_backend_lists_choices() -> None:
    with pytest.raises(UsageError) as err:
        get_backend("tpu")
    assert all(name in err.value.message for name in BACKENDS)
    assert get_backend("cpu").device() == "cpu"


def test_describe_and_render_text() -> None:
    torch = fake_torch(cuda=True)
    rows = [describe(name, make(name, torch)) for name in BACKENDS]
    assert [r["backend"] for r in rows if r["detected"]] == ["cuda", "cpu"]
    text = render_text(rows, "cuda")
    assert "NVIDIA H100 80GB HBM3 [sm_90]" in text and "default backend: cuda" in text


def test_describe_keeps_going_when_a_fingerprint_fails() -> None:
    backend = CudaBackend(fake_torch(cuda=True))
    backend.fingerprint = lambda: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[method-assign]
    row = describe("cuda", backend)
    assert row["detected"] and row["fingerprint"] is None and "boom" in row["error"]


# ---- real torch (this machine's CPU build) ------------------------------------------------------


@pytest.mark.parametrize("name", ACCELERATORS)
def test_real_torch_accelerator_backends_do_not_crash(name: str) -> None:
    torch = pytest.importorskip("torch")
    backend = make(name, torch)
    if backend.available():
        pytest.skip(f"{name} is really present here; the fake-based tests cover the logic")
    assert backend.fingerprint().backend == name


# ---- the CLI as a subprocess -------------------------------------------------------------------


def _kcgate(
    *args: str, prelude: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    code = f"{prelude}import sys; from kcgate.cli import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


@pytest.mark.slow
def test_runners_json_subprocess() -> None:
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-m", "kcgate", "runners", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "kcgate-runners"
    assert [b["backend"] for b in doc["backends"]] == list(BACKENDS)
    assert "cpu" in doc["detected"] and doc["default"] == doc["detected"][0]
    cpu = next(b for b in doc["backends"] if b["backend"] == "cpu")
    assert cpu["fingerprint"]["flags"]["cpu_capability"] and len(cpu["fingerprint_key"]) == 12


def test_runners_without_torch_exits_3_with_fix() -> None:
    proc = _kcgate("runners", prelude="import sys; sys.modules['torch'] = None; ")
    assert proc.returncode == 3
    assert "torch is needed" in proc.stderr and "pip install torch" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- runner profiles ---------------------------------------------------------------------------


def _profiles() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "runners").glob("*.toml")):
        for runner in tomllib.loads(path.read_text(encoding="utf-8"))["runner"]:
            out.append((path.name, runner))
    return out


def test_every_vendor_has_a_profile_and_doc() -> None:
    for vendor in ("nvidia", "amd", "intel", "apple", "huawei", "cpu"):
        assert (ROOT / "runners" / f"{vendor}.toml").is_file()
        assert (ROOT / "runners" / f"{vendor}.md").is_file()
    covered = {runner["backend"] for _, runner in _profiles()}
    assert covered == set(BACKENDS)


@pytest.mark.parametrize(
    ("file", "runner"), _profiles(), ids=lambda v: v if isinstance(v, str) else v["name"]
)
def test_profile_schema(file: str, runner: dict[str, Any]) -> None:
    assert set(runner) >= {"name", "backend", "labels", "env"}, file
    assert runner["backend"] in BACKENDS, file
    assert isinstance(runner["labels"], list) and all(isinstance(x, str) for x in runner["labels"])
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in runner["env"].items())


@pytest.mark.slow
def test_cpu_variants_change_the_kernels_that_run() -> None:
    """ATEN_CPU_CAPABILITY and OMP_NUM_THREADS really reach torch in a fresh process."""
    torch = pytest.importorskip("torch")
    native = torch.backends.cpu.get_cpu_capability()
    variants = dict(_profiles_in("cpu-variants.toml"))
    assert set(variants) == {"cpu-default", "cpu-avx2"}
    for name, runner in variants.items():
        if runner["expect_capability"] == "AVX2" and native not in ("AVX2", "AVX512"):
            continue  # this host cannot run the AVX2 kernels
        env = {**os.environ, **runner["env"]}
        code = "import torch; print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.stdout.split() == [runner["expect_capability"], str(runner["expect_threads"])], name


def test_cpu_variants_keep_apart_inductor_caches() -> None:
    """A torch.compile cache filled under one ATEN_CPU_CAPABILITY gave garbage under another (torch 2.13,
    AVX-512 host; runners/cpu-variants.toml): variants that change it must not share the cache."""
    variants = dict(_profiles_in("cpu-variants.toml"))
    caches = [r["env"].get("TORCHINDUCTOR_CACHE_DIR") for r in variants.values()]
    assert None not in caches and len(set(caches)) == len(variants)


def _profiles_in(file: str) -> list[tuple[str, dict[str, Any]]]:
    return [(r["name"], r) for f, r in _profiles() if f == file]


@pytest.mark.slow
def test_runners_require_names_the_missing_device_the_torch_and_the_interpreter() -> None:
    from tests.conftest import kcgate

    listing = json.loads(kcgate("runners", "--json").stdout)
    absent = next((b["backend"] for b in listing["backends"] if not b["detected"]), None)
    if absent is None:
        pytest.skip("every backend is detected on this machine")
    proc = kcgate("runners", "--require", absent)
    assert proc.returncode == 3
    assert f"device {absent} is not available to torch" in proc.stderr and sys.executable in proc.stderr
    assert kcgate("runners", "--require", "cpu").returncode == 0
    assert kcgate("runners", "--require", "tpu").returncode == 3  # not a backend name


# ---- the driver version, from the vendor's tool ----------------------------------------------------


def _tool(dir_: Path, name: str, script: str) -> None:
    path = dir_ / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_cuda_fingerprint_records_the_driver_nvidia_smi_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tool(
        tmp_path, "nvidia-smi", 'test "$1" = --query-gpu=driver_version && echo 550.54.15 && echo 550.54.15\n'
    )
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    fp = CudaBackend(fake_torch(cuda=True)).fingerprint()
    assert (fp.driver, fp.runtime) == ("550.54.15", "12.4")  # one GPU's line, of two


def test_rocm_fingerprint_records_the_driver_rocm_smi_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tool(
        tmp_path,
        "rocm-smi",
        'echo "============ ROCm System Management Interface ============"\necho "Driver version: 6.8.5"\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert RocmBackend(fake_torch(cuda=True, hip="6.2.41133")).fingerprint().driver == "6.8.5"


def test_a_failing_or_missing_driver_tool_reads_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kcgate.devices import driver

    _tool(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed'; exit 9\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(driver, "NVIDIA_PROC", tmp_path / "absent")
    monkeypatch.setattr(driver, "AMDGPU_SYS", tmp_path / "absent")
    assert driver.nvidia_driver() == "" and driver.amd_driver() == ""
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
    )
    monkeypatch.setattr(driver, "NVIDIA_PROC", proc)
    assert driver.nvidia_driver() == "535.183.01"  # the kernel module's file, when the tool fails


def test_a_hung_driver_tool_costs_at_most_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from kcgate.devices import driver

    _tool(tmp_path, "rocm-smi", "sleep 30\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(driver, "TOOL_TIMEOUT_S", 0.5)
    monkeypatch.setattr(driver, "AMDGPU_SYS", tmp_path / "absent")
    start = time.monotonic()
    assert driver.amd_driver() == "" and time.monotonic() - start < 10
