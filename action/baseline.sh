#!/usr/bin/env bash
# The action's baseline step (docs/history.md#the-baseline-main-s-own-run): the default branch's recorded
# run of the PR's merge base, or of its nearest recorded ancestor, from the kcgate-history data branch.
# run mode (pull_request): the merge base of the event's base and head; report mode (workflow_run of a
# pull_request): the merge base of the checked-out default branch and the run's head SHA, whose commits
# are fetched as objects only (never checked out, nothing of them run). Writes $RUNNER_TEMP/kcgate-baseline
# and the step outputs dir, base-ref and (run mode) file. Without a baseline nothing fails: it warns.
set -uo pipefail

kcgate="${RUNNER_TEMP:-/tmp}/kcgate-venv/bin/kcgate"
out="${RUNNER_TEMP:-/tmp}/kcgate-baseline"
say() { echo "kcgate baseline: $1"; }
give_up() { echo "::warning title=kcgate baseline::$1; compared without a recorded baseline"; exit 0; }
is_sha() { [[ "$1" =~ ^([0-9a-f]{40}|[0-9a-f]{64})$ ]]; }

# The token only reaches git through the environment of this step (never argv, never .git/config).
if [ -n "${KCGATE_TOKEN:-}" ]; then
  export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="http.extraheader"
  GIT_CONFIG_VALUE_0="AUTHORIZATION: basic $(printf 'x-access-token:%s' "$KCGATE_TOKEN" | base64 | tr -d '\n')"
  export GIT_CONFIG_VALUE_0
fi
export GIT_TERMINAL_PROMPT=0

case "$KCGATE_MODE" in
  run)
    [ "${GITHUB_EVENT_NAME:-}" = pull_request ] || { say "not a pull request: no baseline to fetch"; exit 0; }
    base="$KCGATE_PR_BASE" ;;
  report)
    [ -z "${KCGATE_BASELINE:-}" ] || { say "the baseline input is set: it is the baseline"; exit 0; }
    [ "${KCGATE_RUN_EVENT:-}" = pull_request ] || { say "not a pull request's run: no baseline to fetch"; exit 0; }
    base="$(git rev-parse HEAD 2>/dev/null)" || give_up "the workspace is not a git checkout of the default branch" ;;
  *) exit 0 ;;
esac
head="$KCGATE_PR_HEAD"
is_sha "$base" && is_sha "$head" || give_up "the event names no base and head commit"

# Both commits and their history must be here: fetch what a shallow checkout lacks (objects only).
for sha in "$base" "$head"; do
  git cat-file -e "$sha^{commit}" 2>/dev/null || git fetch -q --no-tags origin "$sha" ||
    give_up "could not fetch commit $sha from origin"
done
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  git fetch -q --no-tags --unshallow origin "$base" || say "the checkout stays shallow: ancestors may be missing"
fi
merge_base="$(git merge-base "$base" "$head")" || give_up "no merge base of $base and $head"
say "merge base $merge_base (base $base, head $head)"

history="$KCGATE_HISTORY_DIR"
if [ -z "$history" ]; then  # no checkout of it given (the run leg): read the data branch, read-only, at its tip
  history="${RUNNER_TEMP:-/tmp}/kcgate-history-data"
  rm -rf "$history" && git init -q "$history"
  if git -C "$history" fetch -q --depth 1 --no-tags "$KCGATE_HISTORY_REMOTE" kcgate-history 2>/dev/null; then
    git -C "$history" checkout -q FETCH_HEAD
  else
    say "no kcgate-history data branch yet: nothing is recorded (first run)"
  fi
fi

args=(baseline fetch --history "$history" --commit "$merge_base" --repo-dir . --dir "$out")
[ "$KCGATE_MODE" != run ] || args+=(--runner "$KCGATE_RUNNER")
[ ! -f "$KCGATE_CONTRACTS" ] || args+=(--contracts "$KCGATE_CONTRACTS")
rm -rf "$out"
"$kcgate" "${args[@]}" || give_up "kcgate baseline fetch failed (see above)"

{
  echo "dir=$out"
  if [ "$KCGATE_MODE" = run ]; then
    # kcgate run replays the baseline's seeds and reruns a new failure on the merge base's code
    # (--baseline, --base-ref; docs/github.md); an older kcgate without those options gets neither.
    if "$kcgate" run --help 2>/dev/null | grep -q -- '--base-ref'; then
      echo "base-ref=$merge_base"
      [ ! -f "$out/$KCGATE_RUNNER.json" ] || echo "file=$out/$KCGATE_RUNNER.json"
    fi
  fi
} >> "$GITHUB_OUTPUT"
