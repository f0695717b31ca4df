#!/usr/bin/env bash
# `npm test` (what CI runs): the bootstrap, the TypeScript build, the vitest suite, the exclusive
# files beside pytest, then the real-engine tier; the type check and the linters beside them.
# The build (dist/, which the suite's CLI tests run) is one core's work for about 20 s and needs
# only node_modules. The linters (`npm run lint`: the type check and ESLint's type-checked rules
# over one program, scripts/check-typescript.mjs, 90-130 CPU-s; Prettier, clang-format, ruff)
# gate no test: they start with the build, at the lowest CPU priority, take its idle core and
# then the core time the suite's files leave idle while they wait on their daemons, and report at
# the end. The type check ran beside the build until 2026-11-30, holding the suite back by the
# 14 s it took more, and then as `tsc -p test` of its own (30-40 CPU-s) before ESLint.
# The suite runs four files at a time in shared worker processes (vitest.config.ts): its
# files mostly wait on events (542 CPU-s in 394 s in the clean-clone run of c08b23f), so its
# wall time is the sum of its files' times over the workers more than its CPU.
# The exclusive files (vitest.config.ts) run one at a time and mostly wait on timers and shaped
# links (0.35-0.85 of a core, measured with time(1)), so pytest runs beside them on one worker.
# The two files of the beside-pytest project go to whichever of the two lanes ends first.
# Each phase prints how long it took and the CPU its processes used (user + system, as time(1)
# counts it), so that a slow phase shows in a CI log, and whether it kept both cores busy or
# waited (CPU seconds near twice the wall time: busy; near the wall time or less: a core idle,
# room to overlap something there). The real-engine environment (.venv-engines, ~3 GB to unpack
# on a fresh machine) is for the real-engine tier only: it is built in the background, at the
# lowest CPU and disk priority, from the end of the bootstrap on, and the tier waits for it.
set -euo pipefail
cd "$(dirname "$0")/.."

# A process and its descendants (pip under the bootstrap under a subshell), children first.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do
    kill_tree "$child"
  done
  kill "$1" 2>/dev/null || true
}

# The background jobs still running when the script ends (a failed phase ends it, and a
# background job does not get the terminal's Ctrl-C) are stopped with it. `jobs -p` lists only
# the jobs not yet waited for, so no pid that the kernel may have given to another process since.
cpu_dir=$(mktemp -d)
trap 'for job in $(jobs -p); do kill_tree "$job"; done; rm -rf "$cpu_dir"' EXIT

# cpu_now: the CPU seconds (user + system) of the processes this shell has waited for so far.
# `times` writes to a file, not into $(...), which would run it in a subshell with no children;
# one file per shell ($BASHPID), since the phases in the background are subshells of their own.
children_cpu() {
  local file=$cpu_dir/$BASHPID
  times >"$file"
  cpu_now=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$file")
}

phase() {
  local name=$1 start=$SECONDS status=0 cpu_start
  shift
  children_cpu
  cpu_start=$cpu_now
  "$@" || status=$?
  children_cpu
  echo "npm test: $name took $((SECONDS - start)) s, $((cpu_now - cpu_start)) s of CPU" >&2
  return "$status"
}

# The vitest suite: both cores (its workers, and the daemons and servers its files start).
suite() {
  phase 'vitest: the suite' npx --no-install vitest run --project suite
}

# The beside-pytest files (vitest.config.ts: they time nothing of their own) that no lane has
# claimed yet, one at a time, each printing its time: each lane runs them once its own work is
# done, so that they go to the lane that ends first (pytest's in one clean-clone run, 306 s against
# the exclusive files' 276 s; the exclusive files' in the next, 244 s against 244 s).
files_beside_unclaimed() {
  local file status=0
  for file in $beside_pytest_files; do
    mkdir "$claims/${file//\//_}" 2>/dev/null || continue
    phase "vitest: $file (beside-pytest)" npx --no-install vitest run --project beside-pytest "$file" || status=$?
  done
  return "$status"
}

# pytest on one worker (not test:python's two): the exclusive files keep the other core.
pytest_then_files_beside() {
  local status=0
  phase 'pytest (beside the exclusive files)' .venv/bin/python -m pytest python/tests -q -n 1 --durations=8 || status=$?
  files_beside_unclaimed || status=$?
  return "$status"
}

exclusive_then_files_beside() {
  local status=0
  phase 'vitest: the exclusive files' npx --no-install vitest run --project exclusive || status=$?
  files_beside_unclaimed || status=$?
  return "$status"
}

# The exclusive vitest files with pytest beside them. The other lane's output waits in a file until
# both are done, so that the reports do not interleave; each lane prints its own time.
exclusive_beside_pytest() {
  local pytest_log status_vitest=0 status_pytest=0
  pytest_log=$(mktemp)
  claims=$(mktemp -d)
  pytest_then_files_beside >"$pytest_log" 2>&1 &
  local pytest=$!
  exclusive_then_files_beside || status_vitest=$?
  wait "$pytest" || status_pytest=$?
  cat "$pytest_log"
  rm -rf "$pytest_log" "$claims"
  if [ "$status_vitest" -ne 0 ] || [ "$status_pytest" -ne 0 ]; then
    echo "npm test: the exclusive files' lane exited $status_vitest, pytest's lane $status_pytest" >&2
    return 1
  fi
}

# The end of the type check and the linters: their report (it waited in a file) and their status.
wait_for_checks() {
  local status=0
  wait "$checks" || status=$?
  cat "$checks_log"
  rm -f "$checks_log"
  return "$status"
}

# Before the real-engine tier: the end of the real-engine environment's background build, and its
# messages (they waited in a log). A failed build does not stop the tier: its tests fail saying why.
wait_for_engines_environment() {
  wait "$engines_build" || true
  cat "$engines_log" >&2
  rm -f "$engines_log"
}

phase bootstrap bash scripts/bootstrap.sh --tests --skip engines --skip typescript
engines_log=$(mktemp)
# At the lowest CPU and disk priorities: the suite (the servers' JetStream files included) and
# then the checks go first; the build fills the time they leave idle. Below the checks' nice 19:
# SCHED_IDLE (chrt --idle), which runs only where nothing else would, so that the checks end
# within the exclusive files' phase instead of sharing its idle core time with this build and
# ending after it (13-35 s of the clean-clone runs until 2026-11-30); the tier, which needs the
# build, comes after both.
idle_priority=(nice -n 19)
if chrt --idle 0 true 2>/dev/null; then idle_priority=(chrt --idle 0 nice -n 19); fi
phase 'the real-engine environment (in the background)' "${idle_priority[@]}" ionice -c 3 bash scripts/bootstrap.sh --only engines >"$engines_log" 2>&1 &
engines_build=$!
# The type check and the linters gate no test: at the lowest CPU priority, they take the core that
# the build leaves idle, then the core time the suite's files leave idle, and go on beside the
# exclusive files if they are not done by then; their report comes at the end.
checks_log=$(mktemp)
{
  renice -n 19 -p "$BASHPID" >/dev/null
  phase 'the type check and the linters (npm run lint, in the background)' npm run --silent lint
} >"$checks_log" 2>&1 &
checks=$!
phase 'the build' bash scripts/bootstrap.sh --only typescript
phase 'the suite' suite
# The beside-pytest project's files, as vitest.config.ts lists them (one vitest start, 1 CPU-s).
beside_pytest_files=$(npx --no-install vitest list --project beside-pytest --filesOnly | sed -n 's/^\[beside-pytest\] //p')
[ -n "$beside_pytest_files" ] || { echo "npm test: vitest lists no file in the beside-pytest project" >&2; exit 1; }
phase 'the exclusive files and pytest' exclusive_beside_pytest
phase 'waiting for the type check and the linters' wait_for_checks
wait_for_engines_environment
phase 'vitest: the real-engine tier' npx --no-install vitest run --project engines
