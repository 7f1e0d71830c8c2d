#!/usr/bin/env bash
# The action's device step: what the vendor's own tool says about the accelerator and its driver, in a
# fold of the log. Nothing here decides anything: a tool that is missing or fails is skipped, and a runner
# with none of them (a CPU runner) says so. The results' fingerprint records the same driver version
# (kcgate/devices/driver.py asks the same tools).
set -uo pipefail

ran=""
show() {  # show TITLE COMMAND...: run a tool with a time limit, inside its own fold
  local title="$1"
  shift
  command -v -- "$1" >/dev/null 2>&1 || return 0
  echo "::group::$title"
  timeout 60 "$@" 2>&1 | head -n 200
  echo "::endgroup::"
  ran="$ran $1"
}

show "NVIDIA: nvidia-smi" nvidia-smi
show "NVIDIA driver" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
show "AMD: rocm-smi" rocm-smi --showproductname --showdriverversion
show "AMD: amd-smi" amd-smi version
show "Intel: xpu-smi" xpu-smi discovery
show "Intel: sycl-ls" sycl-ls
show "Ascend: npu-smi" npu-smi info
if [ -z "$ran" ]; then
  echo "No vendor device tool on PATH (nvidia-smi, rocm-smi, amd-smi, xpu-smi, sycl-ls, npu-smi): a CPU runner, or a container without the vendor's tools"
fi
