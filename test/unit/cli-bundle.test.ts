/**
 * The built `laminar` command is the bundle (scripts/bundle-cli.mjs): a command's start loads the
 * entry and its chunks from dist/src/cli/, not the ~230 modules of tsc's build. (That the chunks
 * find what the code locates from its own module's URL is the CLI tests' business: the dashboard's
 * page in test/dashboard, the repository's scripts and Python in the daemons' tests.)
 */
import { execFile } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../src/services/index.js';

const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'laminar.js');
const run = promisify(execFile);

/** A module hook that names every file the process loads, one `LOADED <url>` line each on stderr. */
const LOAD_LOGGER = `data:text/javascript,${encodeURIComponent(
  `import { register } from 'node:module';
   register('data:text/javascript,' + encodeURIComponent("export async function load(url, context, next) { if (url.startsWith('file:')) console.error('LOADED ' + url); return next(url, context); }"));`,
)}`;

async function filesLoadedBy(args: string[]): Promise<string[]> {
  const { stderr } = await run(process.execPath, ['--import', LOAD_LOGGER, CLI, ...args]);
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('LOADED '))
    .map((line) => line.slice('LOADED '.length));
}

describe('the bundled laminar command', () => {
  it('starts a command from the entry and its chunks, with only commander from node_modules', async () => {
    const cliDir = pathToFileURL(join(REPO_ROOT, 'dist', 'src', 'cli')).href + '/';
    // Resolved as Node resolves it (a checkout may link node_modules from elsewhere).
    const nodeModules = pathToFileURL(realpathSync(join(REPO_ROOT, 'node_modules'))).href + '/';
    const loaded = await filesLoadedBy(['relay', '--help']);
    expect(loaded).toContain(pathToFileURL(CLI).href);
    const ours = loaded.filter((url) => !url.startsWith(nodeModules));
    const outsideTheBundle = ours.filter((url) => !(url.startsWith(cliDir) && /\/(laminar|bundled-[^/]+)\.js$/.test(url)));
    expect(outsideTheBundle).toEqual([]);
    const packages = new Set(loaded.filter((url) => url.startsWith(nodeModules)).map((url) => url.slice(nodeModules.length).split('/')[0]));
    expect([...packages]).toEqual(['commander']);
  });
});
