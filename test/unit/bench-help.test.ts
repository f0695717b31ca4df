/**
 * `npm run bench -- <name> --help` answers for every bench, at once and without running it (a
 * bench that took --help for an unknown option crashed with a stack, and one started its whole
 * run), and a mistyped option is refused plainly, exit 2.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../src/services/index.js';

const MAIN = join(REPO_ROOT, 'dist', 'bench', 'main.js');
const run = promisify(execFile);

/** The benches `npm run bench -- --help` lists. */
async function benches(): Promise<string[]> {
  const { stderr } = await run(process.execPath, [MAIN, '--help']);
  const list = /<([a-z0-9|-]+)>/.exec(stderr)?.[1];
  if (!list) throw new Error(`no list of benches in: ${stderr}`);
  return list.split('|');
}

describe('npm run bench -- <name> --help', () => {
  it('prints each bench usage and exits 0 without running it', async () => {
    const names = await benches();
    expect(names.length).toBeGreaterThan(10);
    for (const name of names) {
      // A bench that ran instead would outlast this bound by minutes; answering takes a moment.
      const { stdout, stderr } = await run(process.execPath, [MAIN, name, '--help'], { timeout: 30_000 });
      expect(`${stdout}${stderr}`, name).toContain(`bench -- ${name}`);
    }
  });

  it('refuses an unknown option with the way to the options, exit 2', async () => {
    const failed = await run(process.execPath, [MAIN, 'fp8', '--bogus']).then(
      () => null,
      (err: unknown) => err as { code?: number; stderr?: string },
    );
    expect(failed?.code).toBe(2);
    expect(failed?.stderr).toContain("Unknown option '--bogus' (the options: npm run bench -- fp8 --help)");
  });
});
