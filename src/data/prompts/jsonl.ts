/**
 * Reads a JSONL prompt file line by line (streaming: a dataset never sits in memory whole).
 * Broken lines are yielded as errors with their line number so that the loader reports them
 * and keeps loading the good lines.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';

export type JsonlItem = { line: number; value: unknown } | { line: number; error: string };

export async function* readJsonl(path: string): AsyncGenerator<JsonlItem> {
  const rl = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity });
  let line = 0;
  for await (const text of rl) {
    line++;
    if (text.trim() === '') continue;
    try {
      yield { line, value: JSON.parse(text) as unknown };
    } catch (err) {
      yield { line, error: `not JSON: ${(err as Error).message}` };
    }
  }
}
