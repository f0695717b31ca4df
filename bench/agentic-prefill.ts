/**
 * What a tool-call move costs, measured on the engine rather than assumed: the dp planner
 * (src/manager/repack/tool-call-moves.ts) charges a move the re-prefill of the trajectory's
 * context at its destination, in decode-token times per context token (`reprefillCost`). That
 * ratio is the engine's prefill time per token over its time per decoded token, read here off
 * the engine's own /generate, with the engine otherwise idle:
 *
 *   prefill ms/token = (t(P prompt tokens, 1 new) − t(S, 1)) / (P − S)
 *   decode ms/token  = (t(S, N new) − t(S, 1)) / (N − 1)
 *
 * medians of `repeats` requests each; every prompt is drawn afresh, so that no prefix cache
 * serves it. The decode figure is one sequence's (the planner's token time is the time of a token
 * at a batch below B, where a step costs the same whatever the batch).
 */
import { randomInt } from 'node:crypto';
import { median } from './support.js';

export interface ReprefillMeasurement {
  prefillMsPerToken: number;
  decodeMsPerToken: number;
  /** prefillMsPerToken / decodeMsPerToken: `laminar manager --reprefill-cost`. */
  reprefillCost: number;
}

export interface ReprefillOptions {
  /** The engine's vocabulary size (prompt ids are drawn below it). */
  vocabSize: number;
  /** P: prompt tokens of the long requests (below the engine's context). */
  contextTokens?: number;
  /** N: tokens of the decode requests. */
  decodeTokens?: number;
  repeats?: number;
}

const SHORT = 8;

/** Times `engineUrl`'s prefill and decode (SGLang's /generate, not streamed). */
export async function measureReprefillCost(engineUrl: string, o: ReprefillOptions): Promise<ReprefillMeasurement> {
  const contextTokens = o.contextTokens ?? 400;
  const decodeTokens = o.decodeTokens ?? 200;
  const repeats = o.repeats ?? 5;
  const timed = async (promptTokens: number, newTokens: number): Promise<number> => {
    const inputIds = Array.from({ length: promptTokens }, () => randomInt(o.vocabSize));
    const started = performance.now();
    const response = await fetch(`${engineUrl}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input_ids: inputIds,
        sampling_params: { max_new_tokens: newTokens, temperature: 1, top_p: 1, top_k: -1, ignore_eos: true },
      }),
    });
    if (!response.ok) throw new Error(`${engineUrl}/generate: HTTP ${response.status}: ${await response.text()}`);
    await response.arrayBuffer();
    return performance.now() - started;
  };
  // One of each first: the engine's first requests pay for warming up.
  await timed(contextTokens, 1);
  await timed(SHORT, decodeTokens);
  const short: number[] = [];
  const long: number[] = [];
  const decode: number[] = [];
  // Interleaved, so that a drift of the machine's load hits the three alike.
  for (let i = 0; i < repeats; i++) {
    short.push(await timed(SHORT, 1));
    long.push(await timed(contextTokens, 1));
    decode.push(await timed(SHORT, decodeTokens));
  }
  const prefillMsPerToken = Math.max(0, (median(long) - median(short)) / (contextTokens - SHORT));
  const decodeMsPerToken = Math.max(Number.EPSILON, (median(decode) - median(short)) / (decodeTokens - 1));
  return { prefillMsPerToken, decodeMsPerToken, reprefillCost: prefillMsPerToken / decodeMsPerToken };
}

export interface EngineRate {
  /** Tokens per second one engine decodes with `batch` sequences at once (every engine busy). */
  tokensPerS: number;
  /** One sequence's time per token at that batch (ms): `batch` / tokensPerS. */
  msPerToken: number;
}

/**
 * The engines' capacity, read as the `sched` section's regime needs it (agentic-sched.ts): every
 * engine decoding `batch` sequences of `tokens` new tokens at once, all engines together (they
 * share the machine's cores, as in a batch), medians of `repeats`. The batch's work over this rate
 * is the least time any order of claims and turns can take; a sequence's time per token at this
 * batch is what its own path costs per token when it never queues.
 */
export async function measureEngineRate(
  engineUrls: readonly string[],
  o: { vocabSize: number; batch: number; tokens?: number; repeats?: number },
): Promise<EngineRate> {
  const tokens = o.tokens ?? 100;
  const repeats = o.repeats ?? 3;
  const one = async (url: string): Promise<void> => {
    const response = await fetch(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input_ids: Array.from({ length: SHORT }, () => randomInt(o.vocabSize)),
        sampling_params: { max_new_tokens: tokens, temperature: 1, top_p: 1, top_k: -1, ignore_eos: true },
      }),
    });
    if (!response.ok) throw new Error(`${url}/generate: HTTP ${response.status}: ${await response.text()}`);
    await response.arrayBuffer();
  };
  const rates: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const started = performance.now();
    await Promise.all(engineUrls.flatMap((url) => Array.from({ length: o.batch }, () => one(url))));
    rates.push((o.batch * tokens * 1000) / (performance.now() - started));
  }
  const tokensPerS = median(rates);
  return { tokensPerS, msPerToken: (o.batch * 1000) / tokensPerS };
}
