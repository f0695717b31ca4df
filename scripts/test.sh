#!/usr/bin/env bash
# `npm test` (what CI runs): the bootstrap, the type check beside the linters, the vitest suite,
# then pytest. tsc and eslint are each one core's work for about a minute, so on a 2-core machine
# they run side by side. Each phase prints how long it took, so that a slow phase shows in a CI log.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "npm test: $name took $((SECONDS - start)) s" >&2
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

phase bootstrap bash scripts/bootstrap.sh --tests
phase 'type check and lint' checks
phase vitest npx --no-install vitest run
phase pytest npm run --silent test:python
