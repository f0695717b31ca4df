#!/usr/bin/env bash
# `npm test` (what CI runs): the bootstrap, the type check beside the linters, the vitest suite,
# the exclusive files beside pytest, then the real-engine tier. tsc and eslint are each one core's
# work for about a minute, so on a 2-core machine they run side by side. The exclusive files
# (vitest.config.ts) run one at a time and mostly wait on timers and shaped links (0.35-0.75
# of a core, measured with time(1)), so pytest runs beside them on one worker. Each phase prints
# how long it took, so that a slow phase shows in a CI log.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() {
  local name=$1 start=$SECONDS status=0
  shift
  "$@" || status=$?
  echo "npm test: $name took $((SECONDS - start)) s" >&2
  return "$status"
}

checks() {
  npx --no-install tsc -p test &
  local tsc=$! lint=0 types=0
  npm run --silent lint || lint=$?
  wait "$tsc" || types=$?
  if [ "$types" -ne 0 ] || [ "$lint" -ne 0 ]; then
    echo "npm test: the type check (tsc -p test) exited $types, the linters (npm run lint) $lint" >&2
    return 1
  fi
}

# The exclusive vitest files with pytest beside them. pytest's output waits in a file until both
# are done, so that the two reports do not interleave; each side prints its own time.
exclusive_beside_pytest() {
  local log status_vitest=0 status_pytest=0
  log=$(mktemp)
  # One worker (not test:python's two): the exclusive files keep the other core.
  phase 'pytest (beside the exclusive files)' .venv/bin/python -m pytest python/tests -q -n 1 --durations=8 >"$log" 2>&1 &
  local pytest=$!
  # A background job does not get the terminal's Ctrl-C: stopped with the script instead.
  trap 'pkill -TERM -P "$pytest" 2>/dev/null; kill "$pytest" 2>/dev/null; true' EXIT
  phase 'vitest: the exclusive files' npx --no-install vitest run --project exclusive || status_vitest=$?
  wait "$pytest" || status_pytest=$?
  trap - EXIT
  cat "$log"
  rm -f "$log"
  if [ "$status_vitest" -ne 0 ] || [ "$status_pytest" -ne 0 ]; then
    echo "npm test: the exclusive vitest files exited $status_vitest, pytest $status_pytest" >&2
    return 1
  fi
}

phase bootstrap bash scripts/bootstrap.sh --tests
phase 'type check and lint' checks
phase 'vitest: the suite' npx --no-install vitest run --project suite
phase 'the exclusive files and pytest' exclusive_beside_pytest
phase 'vitest: the real-engine tier' npx --no-install vitest run --project engines
