#!/usr/bin/env bash
# The action's install step: kcgate into its own venv, pinned, and (run mode) able to see the
# interpreter's torch. Reads KCGATE_* from the step's env; writes the venv to $RUNNER_TEMP/kcgate-venv.
set -euo pipefail

fail() {  # one ::error line, outside the fold so it stays in sight, and exit 3 (bad usage), as kcgate does
  echo "::endgroup::"
  echo "::error title=kcgate install::$1"
  exit 3
}

[ "$KCGATE_MODE" != history ] || KCGATE_MODE=report  # history mode needs what report mode installs
echo "::group::Install kcgate ($KCGATE_MODE mode)"

action="${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is not set}"
venv="${RUNNER_TEMP:-/tmp}/kcgate-venv"
python_in="${KCGATE_PYTHON:-python3}"
python="$(command -v -- "$python_in" || true)"
[ -n "$python" ] || fail "input python: '${python_in//[^a-zA-Z0-9_.\/-]/?}' is not an interpreter on PATH; give the path of the Python that has your torch, e.g. /opt/venv/bin/python"

fix="fix: set the action's python input to the interpreter that has your vendor's torch (a venv: /path/to/venv/bin/python; conda: \$CONDA_PREFIX/bin/python), or install torch into $python first (CPU: pip install torch --index-url https://download.pytorch.org/whl/cpu). kcgate never installs torch: it could replace your vendor build"

if [ "$KCGATE_MODE" = run ]; then
  # Before anything is downloaded: the interpreter must import torch (a venv or conda env's own torch).
  if ! err="$("$python" -c 'import torch' 2>&1)"; then
    reason="$(printf '%s' "$err" | tail -n 1 | tr -d '\r' | cut -c1-200)"
    fail "$python cannot import torch ($reason); $fix"
  fi
fi

# kcgate's own venv, created by the input interpreter. In run mode it sees that interpreter's
# site-packages through a .pth file: for a venv or conda env these are its own packages (where
# --system-site-packages would show the base interpreter's, without the torch).
rm -rf "$venv"
"$python" -m venv "$venv"
if [ "$KCGATE_MODE" = run ]; then
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$python" -c 'import sys
for p in sys.path:
    if p.rstrip("/").endswith(("site-packages", "dist-packages")):
        print(p)' > "$site/kcgate-runner-env.pth"
fi

constraints="$action/action/constraints-$KCGATE_MODE.txt"

export PIP_DISABLE_PIP_VERSION_CHECK=1
args=(install --quiet --no-build-isolation -c "$constraints")
if [ -n "${KCGATE_WHEELHOUSE:-}" ]; then
  [ -d "$KCGATE_WHEELHOUSE" ] || fail "input wheelhouse: ${KCGATE_WHEELHOUSE//[^a-zA-Z0-9_.\/-]/?} is not a directory"
  args+=(--no-index --find-links "$KCGATE_WHEELHOUSE")
fi
if [ -n "${KCGATE_PIP_CACHE:-}" ]; then
  mkdir -p "$KCGATE_PIP_CACHE"
  export PIP_CACHE_DIR="$KCGATE_PIP_CACHE"
fi
target="$action"
if [ "$KCGATE_MODE" = report ]; then target="$action[github]"; fi
# kcgate is pure Python: setuptools (pinned) builds it in the venv, without a second, unpinned env.
# The venv's bundled setuptools (Python < 3.12) goes first, so a pinned one the runner has can serve.
"$venv/bin/python" -m pip uninstall --quiet --yes setuptools >/dev/null 2>&1 || true
"$venv/bin/python" -m pip "${args[@]}" setuptools
"$venv/bin/python" -m pip "${args[@]}" "$target"

if [ "$KCGATE_MODE" = run ]; then
  # After install, from kcgate's venv: torch is visible and the requested device is there.
  if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
    fail "kcgate's venv cannot import the torch of $python; $fix"
  fi
  check=(runners)
  if [ -n "${KCGATE_DEVICE:-}" ]; then check+=(--require "$KCGATE_DEVICE"); fi
  if ! out="$("$venv/bin/kcgate" "${check[@]}" 2>&1)"; then
    echo "$out"
    fail "$(printf '%s' "$out" | tail -n 1 | cut -c1-300) (interpreter: $python)"
  fi
  echo "$out"
fi
echo "::endgroup::"
echo "kcgate installed in $venv for $python"
