/** The agent's pure parts: SSE framing, Prometheus text, requests from payloads, the built-in reward. */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { parsePrometheusText, sumOf, meanOf } from '../../src/rollout-agent/prometheus-text.js';
import { promptOf, seedOf } from '../../src/rollout-agent/requests.js';
import { computeReward, loadRewardFunction, targetMatchReward, type RewardInput } from '../../src/rollout-agent/rewards.js';
import { sseEvents } from '../../src/rollout-agent/sse.js';
import { compareVersions, completionBody, tokensOf } from '../../src/rollout-agent/vllm-client.js';

/** The parts as a network read would deliver them: one per turn of the event loop. */
async function* bytes(...parts: (string | Uint8Array)[]): AsyncGenerator<Uint8Array> {
  for (const p of parts) yield await Promise.resolve(typeof p === 'string' ? new TextEncoder().encode(p) : p);
}

async function events(...parts: (string | Uint8Array)[]): Promise<string[]> {
  const out: string[] = [];
  for await (const e of sseEvents(bytes(...parts))) out.push(e);
  return out;
}

describe('sseEvents', () => {
  it('reassembles events split across reads, CRLF lines and a UTF-8 character cut in two', async () => {
    const euro = new TextEncoder().encode('data: {"t":"€"}\n\n');
    const cut = euro.indexOf(0xe2) + 1;
    expect(await events('data: {"a":', '1}\r\n\r\n', euro.subarray(0, cut), euro.subarray(cut), 'data: [DONE]\n\n')).toEqual([
      '{"a":1}',
      '{"t":"€"}',
      '[DONE]',
    ]);
  });

  it('skips comments and other fields, joins multi-line data, and ends an unterminated last event', async () => {
    expect(await events(': keep-alive\n', 'event: x\nid: 3\ndata: a\ndata: b\n\n', 'data:c')).toEqual(['a\nb', 'c']);
  });
});

describe('parsePrometheusText', () => {
  const text = [
    '# HELP sglang:token_usage The token usage',
    '# TYPE sglang:token_usage gauge',
    'sglang:token_usage{model_name="m",tp_rank="0"} 0.25',
    'sglang:token_usage{model_name="m",tp_rank="1"} 0.75',
    'sglang:num_running_reqs{model_name="a \\"quoted\\", name"} 3',
    'sglang:num_queue_reqs 2 1700000000000',
    'sglang:gen_throughput NaN',
    'garbage line here',
  ].join('\n');

  it('reads samples with escaped label values, sums and means over label sets, skips NaN and garbage', () => {
    const samples = parsePrometheusText(text);
    expect(samples.find((s) => s.name === 'sglang:num_running_reqs')?.labels.model_name).toBe('a "quoted", name');
    expect(meanOf(samples, 'sglang:token_usage')).toBe(0.5);
    expect(sumOf(samples, 'sglang:num_running_reqs')).toBe(3);
    expect(sumOf(samples, 'sglang:num_queue_reqs')).toBe(2);
    expect(sumOf(samples, 'sglang:gen_throughput')).toBeNull();
    expect(parsePrometheusText(text, new Set(['sglang:num_queue_reqs']))).toHaveLength(1);
  });
});

describe('prompts and rewards', () => {
  it('takes input_ids or text from a payload and refuses anything else with ERR_BAD_PROMPT_PAYLOAD', () => {
    expect(promptOf({ input_ids: [1, 2, 3] })).toEqual({ ids: [1, 2, 3] });
    expect(promptOf({ text: 'hello' })).toEqual({ text: 'hello' });
    for (const bad of [null, 7, { input_ids: [] }, { input_ids: [1.5] }, { input_ids: [-1] }, { text: '' }, { question: 'x' }]) {
      expect(() => promptOf(bad)).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_PROMPT_PAYLOAD }));
    }
  });

  it('seeds a trajectory from its id alone', () => {
    expect(seedOf('g-1.0')).toBe(seedOf('g-1.0'));
    expect(seedOf('g-1.0')).not.toBe(seedOf('g-1.1'));
    expect(seedOf('g-1.0')).toBeLessThan(2 ** 31);
  });

  const input = (response: number[], target: unknown = [5, 6, 7], stops: number[] = [2]): RewardInput => ({
    trajectoryId: 't',
    payload: { target },
    promptTokens: [1],
    responseTokens: response,
    finishReason: 'stop',
    stopTokenIds: stops,
  });

  it('target-match: the share of target positions right, cut at the first stop token (the rule of laminar.testing.digits)', () => {
    expect(targetMatchReward(input([5, 6, 7, 2]))).toBe(1);
    expect(targetMatchReward(input([5, 9, 7]))).toBeCloseTo(2 / 3);
    expect(targetMatchReward(input([5, 2, 7]))).toBeCloseTo(1 / 3);
    expect(targetMatchReward(input([5]))).toBeCloseTo(1 / 3);
    expect(targetMatchReward(input([5, 6, 7, 8, 9]))).toBe(1);
    expect(targetMatchReward(input([]))).toBe(0);
  });

  it('a reward that throws or is not a finite number is ERR_REWARD_FAILED; a bad flag is ERR_INVALID_ARG', async () => {
    await expect(computeReward(targetMatchReward, input([5], 'nope'))).rejects.toMatchObject({ code: ErrorCodes.REWARD_FAILED });
    await expect(computeReward(() => Number.NaN, input([5]))).rejects.toMatchObject({ code: ErrorCodes.REWARD_FAILED });
    await expect(
      computeReward(
        () => {
          throw new Error('boom');
        },
        input([5]),
      ),
    ).rejects.toMatchObject({ code: ErrorCodes.REWARD_FAILED, message: expect.stringContaining('boom') as string });
    await expect(loadRewardFunction({ builtin: 'exact' })).rejects.toMatchObject({ code: ErrorCodes.INVALID_ARG });
    await expect(loadRewardFunction({ url: 'not a url' })).rejects.toMatchObject({ code: ErrorCodes.INVALID_ARG });
    await expect(loadRewardFunction({ builtin: 'target-match', url: 'http://x' })).rejects.toMatchObject({ code: ErrorCodes.INVALID_ARG });
  });
});

describe('vLLM completion chunks', () => {
  const url = 'http://vllm/v1/completions';
  it('reads token ids from token_ids (0.10.2+) or from "token_id:N" strings, logprobs index-aligned', () => {
    expect(tokensOf({ token_ids: [7, 9], logprobs: { tokens: ['token_id:7', 'token_id:9'], token_logprobs: [-0.5, -1.25] } }, url)).toEqual({
      tokens: [7, 9],
      logprobs: [-0.5, -1.25],
    });
    expect(tokensOf({ logprobs: { tokens: ['token_id:11'], token_logprobs: [null] } }, url)).toEqual({ tokens: [11], logprobs: [0] });
    expect(() => tokensOf({ logprobs: { tokens: ['hello'], token_logprobs: [-1] } }, url)).toThrow(
      expect.objectContaining({ code: ErrorCodes.ENGINE_PROTOCOL }),
    );
  });

  it('names a LoRA adapter in `model` (the base model without one), the rest of the request alike', () => {
    const request = {
      rid: 't-1',
      inputIds: [1, 2, 3],
      maxNewTokens: 8,
      sampling: { temperature: 1, topP: 1, topK: -1, seed: 5, stopTokenIds: [2], ignoreEos: false },
      priority: 30,
    };
    const base = completionBody(request, 'served', true);
    expect(base).toMatchObject({ model: 'served', prompt: [1, 2, 3], max_tokens: 8, request_id: 't-1', stop_token_ids: [2], priority: -30, seed: 5 });
    expect(completionBody({ ...request, lora: null }, 'served', true)).toEqual(base);
    expect(completionBody({ ...request, lora: 'policy-v3' }, 'served', true)).toEqual({ ...base, model: 'policy-v3' });
    expect(completionBody(request, 'served', false)).not.toHaveProperty('seed'); // a CPU engine
  });

  it('orders releases the way the agent gates features on them', () => {
    expect(compareVersions('0.16.0', '0.16.0')).toBe(0);
    expect(compareVersions('0.12.1', '0.16.0')).toBeLessThan(0);
    expect(compareVersions('0.33.0+cu128', '0.16.0')).toBeGreaterThan(0);
    expect(compareVersions('0.16.0rc1', '0.16')).toBe(0);
  });
});
