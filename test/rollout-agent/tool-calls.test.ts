/** Multi-turn pieces without servers: tool-call parsers, tool specs, the tool-match reward, the per-turn staleness bound. */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { loadRewardFunction, toolMatchReward, type RewardInput } from '../../src/rollout-agent/rewards.js';
import {
  callProblem,
  createToolCallParser,
  LOOKUP_TOOLS,
  parseHermesJson,
  parseToolSpecs,
  TokenCallsParser,
} from '../../src/rollout-agent/tool-calls/index.js';
import { staleAtTurn } from '../../src/rollout-agent/turn-staleness.js';

// The lookup task's ids (python/src/laminar/testing/tools.py).
const [EOS, CALL, END, LOOKUP] = [2, 16, 17, 20];
const d = (s: string): number[] => Array.from(s, (c) => 4 + Number(c));

describe('token-calls parser (the lookup task)', () => {
  const parser = new TokenCallsParser();

  it('reads lookup(key) from token ids and stops turns at </tool_call>', async () => {
    expect(parser.stopTokenIds).toEqual([END]);
    expect(await parser.parse([CALL, LOOKUP, ...d('314'), END])).toEqual({ kind: 'call', call: { tool: 'lookup', args: { key: '314' } } });
    expect(await parser.parse([...d('6543'), EOS])).toEqual({ kind: 'answer' });
  });

  it('a malformed call is a bad call with the reason', async () => {
    const cases: [number[], RegExp][] = [
      [[CALL, LOOKUP, ...d('31')], /not closed/],
      [[LOOKUP, END], /closing tool-call tag without an opening/],
      [[CALL, 7, 5, END], /names no tool/],
      [[CALL, END], /names no tool/],
      [[CALL, LOOKUP, END], /no argument/],
      [[CALL, LOOKUP, 7, EOS, END], /must be digits/],
      [[CALL, CALL, LOOKUP, 7, END], /opened twice/],
    ];
    for (const [turn, why] of cases) {
      const parsed = await parser.parse(turn);
      expect(parsed.kind, JSON.stringify(turn)).toBe('bad_call');
      expect(parsed.kind === 'bad_call' && parsed.message).toMatch(why);
    }
  });

  it('observations are the digits, or error for anything else', () => {
    expect(parser.observationText({ status: 'ok', output: '6543' })).toBe('6543');
    expect(parser.observationText({ status: 'ok', output: 'x' })).toBe('error');
    for (const status of ['error', 'timeout', 'failed', 'bad_call']) expect(parser.observationText({ status, output: '6543' })).toBe('error');
  });
});

describe('hermes parser', () => {
  const text = new Map<string, string>([
    ['1,2', '{"name": "python", "arguments": {"code": "print(1)"}}'],
    ['3', '{"name": "python", "arguments": "{\\"code\\": \\"x\\"}"}'],
    ['4', '{"name": "python", "arguments": '],
  ]);
  const parser = createToolCallParser('hermes', { callIds: [100, 101], decode: (ids) => Promise.resolve(text.get(ids.join(',')) ?? '') });

  it('finds the call on the tag ids and reads its JSON from the detokenized inside', async () => {
    expect(parser.stopTokenIds).toEqual([101]);
    expect(await parser.parse([9, 100, 1, 2, 101])).toEqual({ kind: 'call', call: { tool: 'python', args: { code: 'print(1)' } } });
    expect(await parser.parse([100, 3, 101])).toEqual({ kind: 'call', call: { tool: 'python', args: { code: 'x' } } });
    expect(await parser.parse([5, 6])).toEqual({ kind: 'answer' });
    expect((await parser.parse([100, 4, 101])).kind).toBe('bad_call');
  });

  it('names what is wrong with the JSON', () => {
    expect(parseHermesJson('[1]')).toMatchObject({ kind: 'bad_call', message: /not a JSON object/ });
    expect(parseHermesJson('{"arguments": {}}')).toMatchObject({ kind: 'bad_call', tool: null, message: /no "name"/ });
    expect(parseHermesJson('{"name": "f", "arguments": "nope"}')).toMatchObject({ kind: 'bad_call', tool: 'f' });
    expect(parseHermesJson('{"name": "f", "arguments": [1]}')).toMatchObject({ kind: 'bad_call', tool: 'f', message: /not an object/ });
    expect(parseHermesJson('{"name": "f"}')).toEqual({ kind: 'call', call: { tool: 'f', args: {} } });
  });

  it('errors go back as JSON the model can read', () => {
    expect(JSON.parse(parser.observationText({ status: 'timeout', output: 'ran 30 s', code: 'ERR_ACTION_TIMEOUT' }))).toEqual({
      error: 'ERR_ACTION_TIMEOUT',
      status: 'timeout',
      message: 'ran 30 s',
    });
    expect(parser.observationText({ status: 'ok', output: '42' })).toBe('42');
  });

  it('is refused without its ids or a detokenizer, as is an unknown parser', () => {
    expect(() => createToolCallParser('hermes', { decode: () => Promise.resolve('') })).toThrow(/--tool-call-ids/);
    expect(() => createToolCallParser('hermes', { callIds: [1, 2] })).toThrow(/detokenizes/);
    expect(() => createToolCallParser('xml', {})).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
  });
});

describe('tool specs', () => {
  it('checks a call: unknown tool, missing, extra and mistyped arguments', () => {
    expect(callProblem({ tool: 'lookup', args: { key: '314' } }, LOOKUP_TOOLS)).toBeNull();
    expect(callProblem({ tool: 'search', args: {} }, LOOKUP_TOOLS)).toMatch(/unknown tool "search"/);
    expect(callProblem({ tool: 'lookup', args: {} }, LOOKUP_TOOLS)).toMatch(/key is missing/);
    expect(callProblem({ tool: 'lookup', args: { key: 314 } }, LOOKUP_TOOLS)).toMatch(/key must be a string/);
    expect(callProblem({ tool: 'lookup', args: { key: '1', limit: 2 } }, LOOKUP_TOOLS)).toMatch(/unknown argument limit/);
  });

  it('parses --tools JSON and refuses what makes no spec', () => {
    const specs = parseToolSpecs('{"python": {"kind": "python", "args": {"code": "string", "n": "integer"}, "timeoutMs": 10000}}');
    expect(specs.get('python')).toEqual({ name: 'python', kind: 'python', args: { code: 'string', n: 'integer' }, timeoutMs: 10000 });
    expect(callProblem({ tool: 'python', args: { code: 'x', n: 1.5 } }, specs)).toMatch(/n must be an integer/);
    for (const bad of [
      'nope',
      '[]',
      '{}',
      '{"f": {"kind": "Bad Kind"}}',
      '{"f": {"kind": "k", "args": {"a": "float"}}}',
      '{"f": {"kind": "k", "timeoutMs": 0}}',
    ])
      expect(() => parseToolSpecs(bad), bad).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_ARG }));
  });
});

describe('tool-match reward (laminar.testing.tools.reward)', () => {
  const payload = { call: [CALL, LOOKUP, ...d('314'), END], target: d('6543') };
  const input = (turns: number[][], observation = [18, ...d('6543'), 19]): RewardInput => {
    const responseTokens: number[] = [];
    const segments: { kind: 'generated' | 'observation'; length: number }[] = [];
    turns.forEach((turn, i) => {
      if (i > 0) {
        responseTokens.push(...observation);
        segments.push({ kind: 'observation', length: observation.length });
      }
      responseTokens.push(...turn);
      segments.push({ kind: 'generated', length: turn.length });
    });
    return { trajectoryId: 't', payload, promptTokens: [], responseTokens, finishReason: 'stop', stopTokenIds: [EOS, END], segments };
  };

  it('gives half for the call and half for the answer, as the Python rule', async () => {
    expect(toolMatchReward(input([payload.call, [...payload.target, EOS]]))).toBe(1);
    expect(toolMatchReward(input([payload.call]))).toBe(0.5);
    expect(toolMatchReward(input([[...payload.target, EOS]]))).toBe(0);
    expect(
      toolMatchReward(
        input([
          [CALL, LOOKUP, ...d('399'), END],
          [...payload.target, EOS],
        ]),
      ),
    ).toBeCloseTo((4 / 6 + 1) / 2);
    expect(toolMatchReward(input([payload.call, [EOS, ...payload.target]]))).toBe(0.5);
    expect(await loadRewardFunction({ builtin: 'tool-match' })).toBe(toolMatchReward);
    expect(() => toolMatchReward({ ...input([payload.call]), payload: { target: [1] } })).toThrow(expect.objectContaining({ code: ErrorCodes.REWARD_FAILED }));
  });
});

describe('per-turn staleness', () => {
  it('aborts only past the bound, and never without one or without a known newest version', () => {
    expect(staleAtTurn(3, 5, 2)).toBe(false);
    expect(staleAtTurn(3, 6, 2)).toBe(true);
    expect(staleAtTurn(3, 3, 0)).toBe(false);
    expect(staleAtTurn(3, 4, 0)).toBe(true);
    expect(staleAtTurn(3, 100, null)).toBe(false);
    expect(staleAtTurn(3, 100, -1)).toBe(false);
    expect(staleAtTurn(3, null, 0)).toBe(false);
  });
});
