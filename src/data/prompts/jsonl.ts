/**
 * Reads a JSONL prompt file line by line (streaming: a dataset never sits in memory whole).
 * Broken lines are yielded as errors with their line number so that the loader reports them
 * and keeps loading the good lines.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';

export type JsonlItem = { line: number; value: unknown } | { line: number; error: string };

export interface JsonlOptions {
  /** Called with the bytes read from the file so far (at most once per line read). */
  onProgress?: (bytesRead: number) => void;
}

export async function* readJsonl(path: string, options: JsonlOptions = {}): AsyncGenerator<JsonlItem> {
  const input = createReadStream(path, { encoding: 'utf8' });
  const rl = createInterface({ input, crlfDelay: Infinity });
  let line = 0;
  for await (const text of rl) {
    line++;
    options.onProgress?.(input.bytesRead);
    if (text.trim() === '') continue;
    try {
      yield { line, value: JSON.parse(text) as unknown };
    } catch (err) {
      yield { line, error: `not JSON: ${(err as Error).message}` };
    }
  }
}
