#!/usr/bin/env bash
# kcgate mutate on Liger-Kernel's Triton kernels, on the CPU, under the Triton interpreter.
#   LIGER_SITE=DIR benchmarks/third_party/liger/run.sh [CONTRACTS] [kcgate mutate options ...]
# LIGER_SITE: a directory holding liger_kernel and triton, installed apart from the project, e.g.
#   pip install --target DIR --no-deps liger-kernel==0.8.5 triton==3.9.0
# CONTRACTS defaults to this directory's contracts.toml (hand-written); init-contracts.toml is what kcgate init
# writes. interpreter_site/ closes two gaps of the interpreter the compiled way (README.md here).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
site="${LIGER_SITE:?set LIGER_SITE to the directory liger_kernel and triton are installed in}"
contracts="${1:-$here/contracts.toml}"
shift || true
export TRITON_INTERPRET=1
export PYTHONPATH="$root:$here/interpreter_site:$site${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m kcgate mutate "$contracts" --include-installed "$@"
