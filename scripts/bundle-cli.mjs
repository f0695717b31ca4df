#!/usr/bin/env node
/**
 * Bundles the `laminar` command (src/cli/laminar.ts) into dist/src/cli/laminar.js, over the file
 * tsc wrote there, with its dependencies: one start of a daemon then reads a few files instead
 * of resolving and evaluating ~400 modules. Node's module loading was most of a daemon's start:
 * `laminar relay --help` took 0.64 CPU seconds built by tsc alone and 0.34 bundled (the machine's
 * bare `node -e 0` is 0.11), measured with time(1) on the 2-core development VM; a job, the demo
 * and the test suite start hundreds of them.
 *
 * Each command stays a chunk of its own, loaded when that command runs (the lazy imports of
 * src/cli/laminar.ts), and the chunks sit beside the entry in dist/src/cli/ (`bundled-*.js`), so
 * that the paths the code computes from its own module's URL (src/services/python.ts's REPO_ROOT,
 * the CLI's own path, the simulator's scenarios) come out as they do from tsc's files, which are
 * one directory deep under dist/src/ as well. The rest of dist/ (the library's entry points, the
 * other commands' modules that tests and scripts import) stays tsc's.
 *
 * Left out of the bundle: the native addons (`*.node`, loaded by path), msgpackr's optional
 * native extension, and commander, which scripts/cli-reference.mjs patches from node_modules to
 * print every command's help in one process.
 *
 * Usage: node scripts/bundle-cli.mjs (scripts/bootstrap.sh runs it after tsc).
 */
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const REPO = dirname(dirname(fileURLToPath(import.meta.url)));
const OUT_DIR = join(REPO, 'dist/src/cli');
const CHUNK_PREFIX = 'bundled-';

// The chunks of an earlier bundle: their names carry a hash of their content, so a new bundle
// writes new names and the old ones would pile up.
for (const name of readdirSync(OUT_DIR, { withFileTypes: true })) {
  if (name.isFile() && name.name.startsWith(CHUNK_PREFIX)) rmSync(join(OUT_DIR, name.name));
}

await build({
  absWorkingDir: REPO,
  entryPoints: { laminar: 'src/cli/laminar.ts' },
  outdir: OUT_DIR,
  chunkNames: `${CHUNK_PREFIX}[name]-[hash]`,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  tsconfig: 'tsconfig.json',
  external: ['*.node', 'msgpackr-extract', 'commander'],
  // CommonJS dependencies call require() for Node's built-ins; in an ES module there is no
  // require unless one is made (esbuild's shim would throw "Dynamic require ... is not supported").
  banner: { js: "import { createRequire as laminarBundleRequire } from 'node:module';\nconst require = laminarBundleRequire(import.meta.url);" },
  // Stack traces name the bundle's lines; `node --enable-source-maps` maps them to src/.
  sourcemap: 'linked',
  // The maps point at src/ rather than carrying it (14 MB of map files for 6 MB of code otherwise).
  sourcesContent: false,
  logLevel: 'warning',
  legalComments: 'inline',
});
