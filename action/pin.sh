#!/usr/bin/env bash
# Regenerate the pins in action/constraints-*.txt from a fresh environment (run by a maintainer, with
# network access, before a release). Prints the freeze of each mode's install; review, then paste.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for extra in "" "[github]"; do
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check "setuptools>=77" "${root}${extra}"
  echo "# kcgate${extra}"
  "$tmp/venv/bin/python" -m pip freeze --exclude kcgate --exclude pip | tr 'A-Z_' 'a-z-'
  rm -rf "$tmp/venv"
done
