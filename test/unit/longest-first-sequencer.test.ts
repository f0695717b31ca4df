import { existsSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { TestSpecification, Vitest } from 'vitest/node';
import { LONGEST_FILES, LongestFirstSequencer } from '../helpers/longest-first-sequencer.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** A file of a project as the sequencer sees it: size known, no cached result (a clean clone). */
function spec(path: string, project: string, groupOrder: number, isolate = true): TestSpecification {
  return { moduleId: join(REPO, path), project: { name: project, config: { sequence: { groupOrder }, isolate } } } as unknown as TestSpecification;
}

function sequencer(sizes: Record<string, number>): LongestFirstSequencer {
  const ctx = {
    config: { root: REPO },
    cache: {
      getFileTestResults: () => undefined,
      getFileStats: (key: string) => ({ size: sizes[key.split(':')[1]!] ?? 1 }),
    },
  };
  return new LongestFirstSequencer(ctx as unknown as Vitest);
}

describe('LongestFirstSequencer', () => {
  it('names files that exist (a renamed file would silently lose its place)', () => {
    for (const file of LONGEST_FILES) expect(existsSync(join(REPO, file)), file).toBe(true);
  });

  it('starts the listed files first, longest first, others in size order behind them, each project in its group', async () => {
    const soak = LONGEST_FILES[0]!;
    const agent = LONGEST_FILES[1]!;
    const files = [
      spec('test/unit/big.test.ts', 'suite', 0),
      spec(agent, 'suite', 0),
      spec('test/demo.test.ts', 'exclusive', 1),
      spec('test/unit/small.test.ts', 'suite', 0),
      spec(soak, 'suite', 0),
    ];
    const order = await sequencer({ 'test/unit/big.test.ts': 9_000, 'test/unit/small.test.ts': 100, [soak]: 10, [agent]: 20 }).sort(files);
    expect(order.map((f) => relative(REPO, f.moduleId))).toEqual([soak, agent, 'test/unit/big.test.ts', 'test/unit/small.test.ts', 'test/demo.test.ts']);
  });

  it('starts the files of a project that shares its workers (isolate: false) after the rest of their group, one after the other', async () => {
    // Vitest hands a shared worker on only to the next queued file of the same project: one file
    // of another project between two shared ones would cost a fresh process.
    const agent = LONGEST_FILES[1]!;
    const figures = 'test/simulate/figures.test.ts';
    expect(LONGEST_FILES).toContain(figures);
    const files = [
      spec('test/unit/big.test.ts', 'suite-shared', 0, false),
      spec('test/relay/small.test.ts', 'suite', 0),
      spec(figures, 'suite-shared', 0, false),
      spec('test/demo.test.ts', 'exclusive', 1),
      spec(agent, 'suite', 0),
      spec('test/unit/small.test.ts', 'suite-shared', 0, false),
    ];
    const sizes = { 'test/unit/big.test.ts': 9_000, 'test/relay/small.test.ts': 100, [figures]: 10, 'test/unit/small.test.ts': 50, [agent]: 20 };
    const order = await sequencer(sizes).sort(files);
    expect(order.map((f) => relative(REPO, f.moduleId))).toEqual([
      agent,
      'test/relay/small.test.ts',
      figures,
      'test/unit/big.test.ts',
      'test/unit/small.test.ts',
      'test/demo.test.ts',
    ]);
  });
});
