/**
 * The real-engine environment's lock (python/requirements-engines.txt) installs on a fresh
 * machine: every line a `name==version` pin that PyPI serves, each package once. A `name @
 * file:///...` line (what `pip freeze` writes for a wheel installed from a local file) installs
 * only on the machine that had the file.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/relay.js';

describe('python/requirements-engines.txt', () => {
  it('pins every package by name and version only, once', () => {
    const lines = readFileSync(join(REPO, 'python/requirements-engines.txt'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'));
    expect(lines.length).toBeGreaterThan(50);
    const notPins = lines.filter((l) => !/^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$/.test(l));
    expect(notPins, 'lines that are not name==version').toEqual([]);
    const names = lines.map((l) =>
      l
        .split('==')[0]!
        .toLowerCase()
        .replace(/[-_.]+/g, '-'),
    );
    expect(
      names.filter((n, i) => names.indexOf(n) !== i),
      'packages pinned twice',
    ).toEqual([]);
  });
});
