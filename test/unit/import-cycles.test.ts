/**
 * No import cycles in src/ (type-only imports included, as madge counts them): a cycle makes
 * two modules one in all but name, and the order in which they load decides what each sees.
 * The imports are read with TypeScript's own pre-processor (no type checking); a cycle is
 * reported with its modules. The Python client has the same check (python/tests/test_import_cycles.py).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');

function filesUnder(dir: string, ext: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(ext))
    .map((f) => join(dir, f));
}

/** The strongly connected groups of more than one module (Tarjan). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      for (let w = stack.pop()!; ; w = stack.pop()!) {
        onStack.delete(w);
        group.push(w);
        if (w === v) break;
      }
      if (group.length > 1) out.push(group.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

function typescriptGraph(): Map<string, Set<string>> {
  const files = new Set(filesUnder(join(root, 'src'), '.ts'));
  const graph = new Map<string, Set<string>>();
  for (const file of files) {
    const deps = new Set<string>();
    for (const ref of ts.preProcessFile(readFileSync(file, 'utf8'), true, true).importedFiles) {
      if (!ref.fileName.startsWith('.')) continue;
      const target = resolve(dirname(file), ref.fileName.replace(/\.js$/, '.ts'));
      const found = [target, join(target, 'index.ts')].find((f) => files.has(f));
      if (found !== undefined) deps.add(relative(root, found));
    }
    graph.set(relative(root, file), deps);
  }
  return graph;
}

describe('import cycles', () => {
  it('src/ has none', () => {
    const graph = typescriptGraph();
    expect(graph.size).toBeGreaterThan(200);
    expect(cycles(graph)).toEqual([]);
  });

  it('finds a cycle when there is one', () => {
    const graph = new Map([
      ['a', new Set(['b'])],
      ['b', new Set(['c'])],
      ['c', new Set(['a'])],
      ['d', new Set(['a'])],
    ]);
    expect(cycles(graph)).toEqual([['a', 'b', 'c']]);
  });
});
