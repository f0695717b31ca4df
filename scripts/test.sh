#!/usr/bin/env bash
# `npm test` (what CI runs): the bootstrap, the TypeScript build beside the type check, the vitest
# suite with the linters beside it, the exclusive files beside pytest, then the real-engine tier.
# The build (dist/, which the suite's CLI tests run) and `tsc -p test` take a core each for about
# half a minute (CPU seconds measured with time(1): the build 31, tsc -p test 34); the build needs
# only node_modules, so the bootstrap leaves it to this phase instead of holding a core for it
# alone. The suite runs four files at a time in shared worker processes (vitest.config.ts): its
# files mostly wait on events (542 CPU-s in 394 s in the clean-clone run of c08b23f), so its
# wall time is the sum of its files' times over the workers more than its CPU, and the linters
# (ESLint's type-checked rules are one core's work for two minutes, 124-172 CPU-s, and gate no
# test) take that idle core time at the lowest CPU priority. Beside the exclusive files they
# had made their phase CPU-bound: 389 s, 797 CPU-s, the linters ending last (c08b23f's run).
# The exclusive files (vitest.config.ts) run one at a time and mostly wait on timers and shaped
# links (0.35-0.85 of a core, measured with time(1)), so pytest runs beside them on one worker,
# and after it the two files of the beside-pytest project.
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

# Statuses kept by hand: a phase runs on the left of ||, where set -e stops nothing.
build_and_type_check() {
  local build=0 types=0
  bash scripts/bootstrap.sh --only typescript &
  local build_job=$!
  npx --no-install tsc -p test || types=$?
  wait "$build_job" || build=$?
  if [ "$build" -ne 0 ] || [ "$types" -ne 0 ]; then
    echo "npm test: the build exited $build, the type check (tsc -p test) $types" >&2
    return 1
  fi
}

# The vitest suite: both cores (its workers, and the daemons and servers its files start).
suite() {
  phase 'vitest: the suite' npx --no-install vitest run --project suite
}

# pytest on one worker (not test:python's two): the exclusive files keep the other core.
pytest_beside() {
  phase 'pytest (beside the exclusive files)' .venv/bin/python -m pytest python/tests -q -n 1 --durations=8
}

# The exclusive vitest files, then those that may run beside pytest (vitest.config.ts's
# beside-pytest project: they time nothing of their own), each printing its time. They run in
# this lane since pytest's became the longer one (297 s against 278 s in the clean-clone run of
# c1b9c98, where they ran after pytest: 35 s more on the longer lane).
exclusive_then_files_beside() {
  local status=0
  phase 'vitest: the exclusive files' npx --no-install vitest run --project exclusive || status=$?
  phase 'vitest: the beside-pytest files' npx --no-install vitest run --project beside-pytest || status=$?
  return "$status"
}

# The exclusive vitest files with pytest beside them. The other lane's output waits in a file until
# both are done, so that the reports do not interleave; each lane prints its own time.
exclusive_beside_pytest() {
  local pytest_log status_vitest=0 status_pytest=0
  pytest_log=$(mktemp)
  pytest_beside >"$pytest_log" 2>&1 &
  local pytest=$!
  exclusive_then_files_beside || status_vitest=$?
  wait "$pytest" || status_pytest=$?
  cat "$pytest_log"
  rm -f "$pytest_log"
  if [ "$status_vitest" -ne 0 ] || [ "$status_pytest" -ne 0 ]; then
    echo "npm test: the exclusive and beside-pytest vitest files exited $status_vitest, pytest $status_pytest" >&2
    return 1
  fi
}

# The linters' end: their report (it waited in a file) and their status.
wait_for_linters() {
  local status=0
  wait "$lint" || status=$?
  cat "$lint_log"
  rm -f "$lint_log"
  if [ "$status" -ne 0 ]; then
    echo "npm test: the linters (npm run lint) exited $status" >&2
    return 1
  fi
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
# At the lowest CPU and disk priorities: the checks and the suite (the servers' JetStream files
# included) go first; the build fills the time they leave idle.
phase 'the real-engine environment (in the background)' nice -n 19 ionice -c 3 bash scripts/bootstrap.sh --only engines >"$engines_log" 2>&1 &
engines_build=$!
phase 'build and type check' build_and_type_check
# The linters gate no test: they start with the suite, at the lowest CPU priority, on the core time
# its files leave idle while they wait on their daemons (the suite used 542 CPU-s in 394 s), and
# go on beside the exclusive files if they are not done by then; their report comes at the end.
lint_log=$(mktemp)
phase 'the linters (beside the suite)' nice -n 19 npm run --silent lint >"$lint_log" 2>&1 &
lint=$!
phase 'the suite' suite
phase 'the exclusive files and pytest' exclusive_beside_pytest
phase 'waiting for the linters' wait_for_linters
wait_for_engines_environment
phase 'vitest: the real-engine tier' npx --no-install vitest run --project engines
