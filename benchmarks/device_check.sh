#!/usr/bin/env bash
# The prepared device check (benchmarks/device_check.py): everything goes under $OUT (default
# ./device-check-out). Run from anywhere; PYTHON picks the interpreter (default: python3).
# Extra arguments go to the script: --smoke (tiny shapes), --device cuda, --budget-s 450, --sections ...
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-device-check-out}"
mkdir -p "$out"
"${PYTHON:-python3}" "$here/device_check.py" --out "$out" "$@" 2>&1 | tee "$out/device_check.log"
exit "${PIPESTATUS[0]}"
