"""The GPU driver's version, from the vendor's own tool: torch documents no API for it on CUDA or ROCm.

The action's device step prints the same tools' output (action/device-info.sh); this records the version in
the fingerprint. Each read is bounded (a hung tool costs at most TOOL_TIMEOUT_S) and degrades to "" when the
tool is missing or fails, as every fingerprint field does. Intel (the device's driver_version property) and
Ascend (CANN's version files) have theirs in their backends.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

TOOL_TIMEOUT_S = 20.0
NVIDIA_PROC = Path(
    "/proc/driver/nvidia/version"
)  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ..."
AMDGPU_SYS = Path("/sys/module/amdgpu/version")  # the amdgpu-dkms module's version, when it is one


def tool_output(*argv: str) -> str:
    """What the tool prints on stdout; "" when it is not on PATH, fails or runs past TOOL_TIMEOUT_S."""
    exe = shutil.which(argv[0])
    if exe is None:
        return ""
    try:  # its own session, so a timeout kills whatever the tool started too (they would hold the pipe)
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except OSError:
        return ""
    try:
        out, _ = proc.communicate(timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return ""
    return out if proc.returncode == 0 else ""


def nvidia_driver() -> str:
    """The NVIDIA driver version, e.g. "550.54.15": nvidia-smi, else the kernel module's /proc file."""
    lines = tool_output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").split()
    if lines:
        return lines[0]
    return _first_match(NVIDIA_PROC, r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")


def amd_driver() -> str:
    """The amdgpu driver version: rocm-smi's "Driver version", else the module's sysfs version."""
    m = re.search(r"Driver version:\s*(\S+)", tool_output("rocm-smi", "--showdriverversion"))
    if m:
        return m.group(1)
    return _first_match(AMDGPU_SYS, r"(\S+)")


def _first_match(path: Path, pattern: str) -> str:
    try:
        m = re.search(pattern, path.read_text(errors="replace"))
    except OSError:
        return ""
    return m.group(1) if m else ""
