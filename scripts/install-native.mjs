#!/usr/bin/env node
/**
 * npm's install step for laminar: builds the native addon (native/*.cc against the system's UCX
 * and xxhash) unless an addon at least as new as its sources is already there. It runs when a
 * project installs laminar and when `npm ci` runs in this repository; `scripts/bootstrap.sh`
 * installs the Debian packages it needs first. A failure names the packages to install instead of
 * leaving a bare compiler error as the last line.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const addon = join(root, 'build', 'Release', 'laminar_native.node');
const sources = [join(root, 'binding.gyp'), ...readdirSync(join(root, 'native')).map((f) => join(root, 'native', f))];

function upToDate() {
  if (!existsSync(addon)) return false;
  const built = statSync(addon).mtimeMs;
  return sources.every((s) => statSync(s).mtimeMs <= built);
}

if (upToDate()) process.exit(0);

// npm hands lifecycle scripts the path of its own node-gyp; a development checkout also has one
// in node_modules. Either builds against the Node headers npm is configured with (nodedir).
const npmNodeGyp = process.env.npm_config_node_gyp;

// ccache, where it is installed (scripts/bootstrap.sh installs it) and no compiler was chosen: its
// compiler names in /usr/lib/ccache go first on the PATH, and the checkout is its base directory,
// so that a second clone (each CI run is one) finds the first clone's objects. The 22 files
// include node-addon-api's headers, 1.3 CPU seconds each at -O3: 42 CPU seconds to compile them,
// 1.4 from the cache (measured with time(1) on the 2-core development VM). ccache refuses to
// compile at all where it cannot write its cache (a read-only or missing home): a build that
// fails through it is done again without it.
const CCACHE_COMPILERS = '/usr/lib/ccache';
const withCcache =
  process.env.CXX === undefined && process.env.CC === undefined && existsSync(join(CCACHE_COMPILERS, 'g++'))
    ? { ...process.env, PATH: `${CCACHE_COMPILERS}:${process.env.PATH ?? ''}`, CCACHE_BASEDIR: process.env.CCACHE_BASEDIR ?? root }
    : undefined;

const [command, args] =
  npmNodeGyp !== undefined && existsSync(npmNodeGyp)
    ? [process.execPath, [npmNodeGyp, 'rebuild', '--jobs=2', '--loglevel=error']]
    : ['npx', ['--no-install', 'node-gyp', 'rebuild', '--jobs=2', '--loglevel=error']];
process.stderr.write('laminar: building the native addon (UCX, shared memory, checksums)\n');
let result = spawnSync(command, args, { cwd: root, stdio: 'inherit', env: withCcache ?? process.env });
if (result.status !== 0 && withCcache !== undefined) {
  process.stderr.write('laminar: the build through ccache failed; building again without it\n');
  result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
}
if (result.status !== 0) {
  process.stderr.write(
    'laminar: the native addon did not build. It needs a C++ compiler, pkg-config and the UCX and xxhash headers:\n' +
      '  apt-get install -y g++ make pkg-config libucx-dev libxxhash-dev\n' +
      'then run `npm rebuild laminar` (or `bash scripts/bootstrap.sh` in a checkout).\n',
  );
  process.exit(result.status ?? 1);
}
