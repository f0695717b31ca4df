/**
 * Server-sent events as inference servers stream them: `data: <json>` lines separated by blank
 * lines, ending with `data: [DONE]`. Only `data:` fields matter to us; comments (`:`), `event:`
 * and `id:` lines are skipped. Bytes are decoded incrementally so that a UTF-8 character or an
 * event split across network reads is reassembled.
 */

/** The payload that ends a stream (SGLang, vLLM and OpenAI-style servers all send it). */
export const SSE_DONE = '[DONE]';

/** Yields the data of each event of `body` (multi-line data joined with "\n"), `[DONE]` included. */
export async function* sseEvents(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = '';
  let data: string[] = [];
  const take = function* (line: string): Generator<string> {
    if (line === '') {
      if (data.length > 0) yield data.join('\n');
      data = [];
      return;
    }
    if (line.startsWith('data:')) data.push(line.slice(line.charAt(5) === ' ' ? 6 : 5));
  };
  for await (const chunk of body) {
    pending += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, newline).replace(/\r$/, '');
      pending = pending.slice(newline + 1);
      yield* take(line);
    }
  }
  pending += decoder.decode();
  if (pending !== '') yield* take(pending.replace(/\r$/, ''));
  yield* take('');
}
