#!/usr/bin/env node
/**
 * Writes test/vectors/trajectories.json: the experience record format (v1, and v2: records with
 * segments, a multi-turn trajectory's turns and observations) as the TypeScript
 * encoder (dist/) produces it, for every writer of the format to check itself against. Each valid
 * case has a writer's input and the record it becomes (subject, `Laminar-Meta` header, payload,
 * and chunks where the payload exceeds a given max_payload); each invalid case has an input and
 * the error it gets (code, message, details). test/data/vectors.test.ts checks the TypeScript
 * side against the file, python/tests/data/test_vectors.py the Python side.
 *   node scripts/trajectory-vectors.mjs           writes the file
 *   node scripts/trajectory-vectors.mjs --check   exits 1 when the file is not what it would write
 * Run after `npm run build:ts`.
 *
 * JSON has no NaN, Infinity or -Infinity: such a number in an input is written as
 * {"$number": "NaN"} (and "Infinity", "-Infinity"); readers revive it.
 */
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const target = join(root, 'test', 'vectors', 'trajectories.json');
const dist = (p) => import(join(root, 'dist', 'src', 'data', p));
const { validateTrajectory, checkPayloadSize, bufferNames, chunkMsgId } = await dist('index.js');
const { encodeMeta, metaOf } = await dist('codec/record-meta.js');
const { encodePayload, chunkLimit, splitPayload, HEADER_ROOM } = await dist('codec/payload.js');

const T0 = 1_700_000_000_000;

/** A valid input: `n` tokens (a 2-token prompt), fixed timestamps. */
function base(id, n = 4, over = {}) {
  return {
    id,
    promptId: `prompt-${id.slice(0, 16)}`,
    groupId: `group-${id.slice(0, 16)}`,
    sampleIndex: 0,
    groupSize: 1,
    weightVersion: 3,
    reward: 1,
    tokens: Array.from({ length: n }, (_, i) => 1000 + i),
    logprobs: Array.from({ length: n }, (_, i) => -i / 8),
    promptLength: Math.min(2, n),
    responseLength: n - Math.min(2, n),
    createdAt: T0,
    completedAt: T0 + 1234,
    ...over,
  };
}

/** JSON.stringify(info).length in bytes is `bytes`: one string value padded to fit. */
function infoOfJsonSize(bytes, numbers) {
  const info = { ...numbers, pad: '' };
  info.pad = 'x'.repeat(bytes - Buffer.byteLength(JSON.stringify(info)));
  return info;
}

// msgpackr's number encoding: an integral number in [-2^31, 2^32) is an int of the smallest
// width, anything else (fractions, larger integers, epoch milliseconds) a float64. Every width
// boundary is here, in the metadata's counts, reward, timestamps and info.
const numberForms = {
  fix127: 0x7f,
  u8: 0x80,
  u8max: 0xff,
  u16: 0x100,
  u16max: 0xffff,
  u32: 0x10000,
  u32max: 0xffffffff,
  over32: 0x100000000,
  neg32: -32,
  i8: -33,
  i8min: -128,
  i16: -129,
  i16min: -32768,
  i32: -32769,
  i32min: -2147483648,
  under32: -2147483649,
  maxSafe: Number.MAX_SAFE_INTEGER,
  big: 2 ** 60,
  tenth: 0.1,
  e21: 1e21,
  small: 1e-7,
  negZero: -0,
  third: 1 / 3,
};

const valid = [
  { name: 'minimal: integral reward, epoch-millisecond timestamps (float64)', input: base('t-1') },
  {
    name: 'every optional field',
    input: base('t-2', 6, { rolloutId: 'rollout-7', priority: 0.5, info: { score: 0.75, ok: true, tag: 'math', n: 3 } }),
  },
  {
    name: 'numbers at every width boundary of the msgpack encoding',
    input: base('t-3', 4, {
      sampleIndex: 127,
      groupSize: 128,
      weightVersion: 0x100000000,
      reward: -0,
      priority: 0,
      createdAt: 1.5,
      completedAt: 0xffffffff,
      info: numberForms,
    }),
  },
  { name: 'negative reward (negative fixint)', input: base('t-4', 2, { reward: -32, weightVersion: 0xffff, sampleIndex: 255, groupSize: 256 }) },
  { name: 'negative reward (int16)', input: base('t-5', 2, { reward: -129, weightVersion: 65536 }) },
  { name: 'fractional reward and priority', input: base('t-6', 2, { reward: 0.1, priority: 2.75 }) },
  {
    name: 'ids a subject token cannot hold: dots, wildcards, spaces, slashes, non-ASCII',
    input: base('q.1/a b*c>d#0/é😀', 3, { promptId: 'q.1 é', groupId: 'q.1#0', rolloutId: 'h.1/r 2' }),
  },
  // fixstr holds up to 31 bytes, str8 up to 255; an id is at most 256 bytes.
  { name: 'a 31-byte id (fixstr)', input: base('a'.repeat(31)) },
  { name: 'a 32-byte id (str8)', input: base('b'.repeat(32)) },
  { name: 'a 255-byte id (str8)', input: base('c'.repeat(255)) },
  { name: 'a 256-byte id (str16)', input: base('d'.repeat(256)) },
  { name: 'a 256-byte id of 2-byte characters', input: base('é'.repeat(128)) },
  { name: 'prompt and group ids may end with spaces (no header carries them)', input: base('t-10', 2, { promptId: ' p ', groupId: 'g\t#0 ' }) },
  {
    name: 'info keys in JavaScript order: array indices first, ascending, then the rest as given',
    input: base('t-7', 2, { info: { b: 1, 2: 'two', 1: true, '01': 3, '-1': 4, 4294967294: 5, 4294967295: 6, a: false } }),
  },
  {
    name: 'info of exactly 4096 JSON bytes, with numbers JSON writes its own way',
    input: base('t-8', 2, { info: infoOfJsonSize(4096, { x: 1e21, y: 0.1, z: 2 ** 60, w: 1e-7 }) }),
  },
  { name: 'no tokens at all', input: base('t-9', 0) },
  {
    name: 'logprobs rounded to float32 (nearest, ties to even; underflow keeps the sign; overflow is Infinity)',
    input: base('t-10', 6, { logprobs: [0.1, -1e-46, 3.4028235e38, 1e39, -2.5, 1 + 2 ** -24] }),
  },
  { name: 'token ids at the ends of int32', input: base('t-11', 4, { tokens: [-2147483648, 2147483647, 0, -1] }) },
  { name: 'a version equal to the newest', input: base('t-12', 2, { weightVersion: 10 }), context: { maxWeightVersion: 10 } },
  { name: 'a payload of exactly the maximum', input: base('t-13', 8), context: { maxTrajectoryBytes: 64 } },
  { name: 'a group of 8, the last sample', input: base('t-14', 2, { sampleIndex: 7, groupSize: 8 }) },
  {
    name: 'chunked: 300 tokens (2400 bytes) on a server whose max_payload leaves 1000 bytes',
    input: base('t-15', 300),
    maxPayload: HEADER_ROOM + 1000,
    chunkSeqs: [7, 8, 9],
  },
  { name: 'chunked: a payload that is exactly two chunks', input: base('t-16', 250), maxPayload: HEADER_ROOM + 1000, chunkSeqs: [4294967296, 4294967297] },
  { name: 'not chunked: a payload of exactly the limit', input: base('t-17', 125), maxPayload: HEADER_ROOM + 1000 },
];

/** A multi-turn input: a 2-token prompt, then the given segments' tokens (observations at logprob 0). */
function turns(id, segments, over = {}) {
  const n = segments.reduce((k, s) => k + s.length, 0);
  const logprobs = [0, 0];
  for (const s of segments) for (let i = 0; i < s.length; i++) logprobs.push(s.kind === 'generated' ? -(i + 1) / 4 : 0);
  return base(id, n + 2, { logprobs, segments, ...over });
}
const gen = (length, weightVersion = 3, finishReason = 'tool_call') => ({ kind: 'generated', length, weightVersion, finishReason });
const obs = (length, action = {}) => ({ kind: 'observation', length, action: { tool: 'lookup', actionId: 'a-1', status: 'ok', latencyMs: 12, ...action } });

valid.push(
  { name: 'v2: one generated segment (the v1 meaning, written out)', input: turns('s-1', [gen(3, 3, 'stop')]) },
  { name: 'v2: a tool call, its observation, the answer', input: turns('s-2', [gen(3), obs(2), gen(2, 3, 'stop')]) },
  {
    name: 'v2: turns from several weight versions, every action status, fractional latency',
    input: turns(
      's-3',
      [
        gen(2, 3),
        obs(1, { status: 'error', latencyMs: 0.5 }),
        gen(1, 4),
        obs(1, { status: 'timeout', tool: 'python' }),
        gen(1, 5),
        obs(1, { status: 'failed' }),
        gen(1, 5),
        obs(2, { status: 'truncated', latencyMs: 70000 }),
        gen(1, 6),
        obs(1, { status: 'bad_call', actionId: 'é'.repeat(20) }),
        gen(1, 6, 'length'),
      ],
      { weightVersion: 3 },
    ),
    context: { maxWeightVersion: 6 },
  },
  { name: 'v2: empty segments (a zero-length observation and turn)', input: turns('s-4', [gen(2), obs(0), gen(0, 3, 'stop')]) },
  { name: 'v2: no segments at all for an empty response', input: base('s-5', 2, { segments: [] }) },
  {
    name: 'v2: 256 segments, the most a record holds',
    input: turns(
      's-6',
      Array.from({ length: 256 }, (_, i) => (i % 2 === 0 ? gen(1, 3, 's') : obs(1, { tool: 't', actionId: 'a', latencyMs: 1 }))),
    ),
  },
  {
    name: 'v2: segments, info and ids at their largest (the header fits its room)',
    input: turns(
      'v'.repeat(256),
      Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0 ? gen(1, 2 ** 40, 'f'.repeat(64)) : obs(1, { tool: 't'.repeat(64), actionId: 'a'.repeat(32), latencyMs: 0.25 }),
      ),
      {
        promptId: 'p'.repeat(256),
        groupId: 'g'.repeat(256),
        rolloutId: 'r'.repeat(256),
        info: infoOfJsonSize(4096, {}),
      },
    ),
  },
  { name: 'v2: chunked, with segments', input: turns('s-8', [gen(200), obs(50), gen(48)]), maxPayload: HEADER_ROOM + 1000, chunkSeqs: [11, 12, 13] },
);

const invalid = [
  {
    name: 'missing fields',
    input: (() => {
      const t = base('bad-1');
      delete t.reward;
      delete t.groupId;
      return t;
    })(),
  },
  { name: 'wrong types', input: base('bad-2', 4, { weightVersion: '3', tokens: 'abc' }) },
  { name: 'a non-integer token', input: base('bad-3', 4, { tokens: [1.5, 2, 3, 4] }) },
  { name: 'a token above int32', input: base('bad-4', 4, { tokens: [2147483648, 2, 3, 4] }) },
  { name: 'a token below int32', input: base('bad-4b', 4, { tokens: [1, -2147483649, 3, 4] }) },
  { name: 'tokens beyond the safe integers and int32', input: base('bad-4c', 4, { tokens: [2 ** 53, 2, -(2 ** 60), 2 ** 31] }) },
  { name: 'a boolean token', input: base('bad-5', 4, { tokens: [true, 2, 3, 4] }) },
  { name: 'a NaN reward', input: base('bad-6', 4, { reward: Number.NaN }) },
  { name: 'an infinite reward', input: base('bad-7', 4, { reward: Infinity }) },
  { name: 'a -Infinity reward', input: base('bad-8', 4, { reward: -Infinity }) },
  { name: 'a null reward', input: base('bad-9', 4, { reward: null }) },
  { name: 'a number', input: 42 },
  { name: 'null', input: null },
  { name: 'an array', input: [] },
  { name: 'a string', input: 'trajectory' },
  { name: 'an empty id', input: base('', 4) },
  { name: 'an id over 256 bytes (129 characters)', input: base('é'.repeat(129), 4) },
  { name: 'an id beginning with a space (NATS trims message ids)', input: base(' x', 4) },
  { name: 'an id ending with a tab', input: base('x\t', 4) },
  { name: 'an id ending with a no-break space', input: base('x\u00a0', 4) },
  { name: 'an id beginning with a byte-order mark', input: base('\ufeffx', 4) },
  { name: 'an id holding a NUL', input: base('a\u0000b', 4) },
  { name: 'an id holding a line feed', input: base('a\nb', 4) },
  { name: 'an id holding a C1 control (NEL)', input: base('a\u0085b', 4) },
  { name: 'an id over 256 bytes ending with a space (one issue)', input: base('é'.repeat(128) + ' ', 4) },
  { name: 'an id that is a number', input: base('x', 4, { id: 5 }) },
  { name: 'an id that is an object', input: base('x', 4, { id: {} }) },
  { name: 'a fractional count', input: base('bad-10', 4, { sampleIndex: 0.5 }) },
  { name: 'a count beyond the safe integers', input: base('bad-11', 4, { weightVersion: 2 ** 53 }) },
  { name: 'a count below the safe integers', input: base('bad-12', 4, { sampleIndex: -(2 ** 53) }) },
  { name: 'an infinite count', input: base('bad-13', 4, { groupSize: Infinity }) },
  { name: 'a boolean count', input: base('bad-14', 4, { sampleIndex: true }) },
  { name: 'a negative priority', input: base('bad-15', 4, { priority: -1 }) },
  { name: 'a NaN priority', input: base('bad-16', 4, { priority: Number.NaN }) },
  { name: 'a rollout id over 256 characters', input: base('bad-17', 4, { rolloutId: 'r'.repeat(257) }) },
  { name: 'a rollout id that is a number', input: base('bad-18', 4, { rolloutId: 5 }) },
  { name: 'info values that are neither string, number nor boolean', input: base('bad-19', 4, { info: { a: null, b: [1], c: 'ok', d: Number.NaN } }) },
  { name: 'info that is a string', input: base('bad-20', 4, { info: 'x' }) },
  { name: 'info that is an array', input: base('bad-21', 4, { info: [1] }) },
  { name: 'info of 4097 JSON bytes', input: base('bad-22', 4, { info: infoOfJsonSize(4097, { x: 1e21, y: 0.1 }) }) },
  { name: 'a NaN logprob', input: base('bad-23', 2, { logprobs: [Number.NaN, 1] }) },
  { name: 'a string logprob', input: base('bad-24', 2, { logprobs: ['a', 1] }) },
  { name: 'logprobs that are not an array', input: base('bad-25', 2, { logprobs: 0.5 }) },
  { name: 'a string timestamp', input: base('bad-26', 2, { createdAt: 'now' }) },
  { name: 'several bad fields, in schema order', input: base('bad-27', 2, { info: 1, rolloutId: 2, completedAt: 'x', promptId: 3 }) },
  { name: 'token/logprob length mismatch', input: base('bad-28', 4, { logprobs: [0, 0, 0] }) },
  { name: 'lengths that do not add up', input: base('bad-29', 4, { promptLength: 3 }) },
  { name: 'a negative prompt length', input: base('bad-30', 4, { promptLength: -4, responseLength: 8 }) },
  { name: 'a negative response length', input: base('bad-31', 4, { promptLength: 6, responseLength: -2 }) },
  { name: 'a negative sample index', input: base('bad-32', 4, { sampleIndex: -1, groupSize: 0 }) },
  { name: 'a negative weight version', input: base('bad-33', 4, { weightVersion: -1 }) },
  { name: 'a group size of 0', input: base('bad-34', 4, { groupSize: 0 }) },
  { name: 'a sample index outside its group', input: base('bad-35', 4, { sampleIndex: 2, groupSize: 2 }) },
  { name: 'a weight version from the future', input: base('bad-36', 4, { weightVersion: 11 }), context: { maxWeightVersion: 10 } },
  { name: 'a payload over the maximum', input: base('bad-37', 9), context: { maxTrajectoryBytes: 64 } },
  { name: 'segments that are not an array', input: base('seg-1', 4, { segments: { kind: 'generated' } }) },
  { name: 'a segment that is not an object', input: turns('seg-2', [gen(1)], { segments: [gen(1), 3] }) },
  { name: 'a segment of an unknown kind', input: turns('seg-3', [gen(2)], { segments: [{ kind: 'tool', length: 2 }] }) },
  { name: 'a negative segment length', input: turns('seg-4', [gen(2)], { segments: [gen(-1)] }) },
  { name: 'a fractional segment length', input: turns('seg-5', [gen(2)], { segments: [gen(1.5)] }) },
  {
    name: 'a generated segment without a weight version',
    input: turns('seg-6', [gen(2)], { segments: [{ kind: 'generated', length: 2, finishReason: 'stop' }] }),
  },
  { name: 'a boolean segment weight version', input: turns('seg-7', [gen(2)], { segments: [gen(2, true)] }) },
  { name: 'an empty finish reason', input: turns('seg-8', [gen(2)], { segments: [gen(2, 3, '')] }) },
  { name: 'a finish reason over 64 bytes', input: turns('seg-9', [gen(2)], { segments: [gen(2, 3, 'é'.repeat(33))] }) },
  { name: 'an observation without its action', input: turns('seg-10', [gen(1), obs(1)], { segments: [gen(1), { kind: 'observation', length: 1 }] }) },
  { name: 'an observation whose tool is a number', input: turns('seg-11', [gen(1), obs(1, { tool: 5 })]) },
  { name: 'a tool name over 64 bytes', input: turns('seg-12', [gen(1), obs(1, { tool: 'x'.repeat(65) })]) },
  { name: 'an empty action id', input: turns('seg-13', [gen(1), obs(1, { actionId: '' })]) },
  { name: 'an action id over 256 bytes', input: turns('seg-14', [gen(1), obs(1, { actionId: 'é'.repeat(129) })]) },
  { name: 'an unknown action status', input: turns('seg-15', [gen(1), obs(1, { status: 'done' })]) },
  { name: 'a negative action latency', input: turns('seg-16', [gen(1), obs(1, { latencyMs: -1 })]) },
  { name: 'an infinite action latency', input: turns('seg-17', [gen(1), obs(1, { latencyMs: Infinity })]) },
  { name: 'the first bad segment is the one reported', input: turns('seg-18', [gen(1), obs(1)], { segments: [gen(1, -1), obs(1, { status: 'x' })] }) },
  { name: 'segments shorter than the response', input: turns('seg-19', [gen(3), obs(2)], { segments: [gen(3), obs(1)] }) },
  { name: 'segments longer than the response', input: turns('seg-20', [gen(3)], { segments: [gen(4)] }) },
  { name: 'segments for an empty response', input: base('seg-21', 2, { segments: [gen(1)] }) },
  { name: 'an observation token with a logprob', input: turns('seg-22', [gen(2), obs(3)], { logprobs: [0, 0, -1, -1, 0, -0.5, 0] }) },
  {
    name: 'a NaN logprob in an observation: a number[] refuses NaN before the segments are looked at',
    input: turns('seg-23', [gen(1), obs(1)], { logprobs: [0, 0, -1, Number.NaN] }),
  },
  { name: 'a turn from a future weight version', input: turns('seg-24', [gen(1, 3), obs(1), gen(1, 11)]), context: { maxWeightVersion: 10 } },
  {
    name: '257 segments',
    input: turns(
      'seg-25',
      Array.from({ length: 257 }, () => gen(1)),
    ),
  },
  {
    name: 'segments over 4096 bytes',
    input: turns(
      'seg-26',
      Array.from({ length: 40 }, () => obs(1, { actionId: 'a'.repeat(100) })),
    ),
  },
  { name: 'a v1 field wrong beside bad segments: the field is reported', input: turns('seg-27', [gen(1)], { reward: 'x', segments: 'x' }) },
];

const bufferNameCases = ['default', 'main', 'a-b_C9', 'x'.repeat(64), '', 'a.b', 'a b', 'a*', 'x'.repeat(65), 'é', 'a>'];

const tagged = (_key, value) => (typeof value === 'number' && !Number.isFinite(value) ? { $number: String(value) } : value);
const revive = (_key, value) => (value !== null && typeof value === 'object' && typeof value.$number === 'string' ? Number(value.$number) : value);
/** What a reader of the file gets: the case's input through JSON (-0 becomes 0; keys keep JSON's order). */
const throughJson = (input) => JSON.parse(JSON.stringify(input, tagged), revive);

function validCase(c) {
  c = { ...c, input: throughJson(c.input) };
  const t = validateTrajectory(c.input, { maxWeightVersion: c.context?.maxWeightVersion });
  if (c.context?.maxTrajectoryBytes !== undefined) checkPayloadSize(t, c.context.maxTrajectoryBytes);
  const names = bufferNames(c.buffer ?? 'default');
  const payload = Buffer.from(encodePayload(t.tokens, t.logprobs));
  const out = { name: c.name, input: c.input };
  if (c.context) out.context = c.context;
  if (c.maxPayload !== undefined) out.maxPayload = c.maxPayload;
  const chunked = c.maxPayload !== undefined && payload.byteLength > chunkLimit(c.maxPayload);
  const chunkSeqs = chunked ? c.chunkSeqs : [];
  if (chunked) {
    const parts = splitPayload(payload, chunkLimit(c.maxPayload));
    if (parts.length !== chunkSeqs.length) throw new Error(`${c.name}: ${parts.length} chunks but ${chunkSeqs.length} chunk sequences`);
    out.chunkSubject = names.chunkSubject(t.id);
    out.chunks = parts.map((p, i) => ({ msgId: chunkMsgId(t.id, i), seq: chunkSeqs[i], payload: Buffer.from(p).toString('base64') }));
  }
  out.subject = names.recordSubject(t.id);
  out.msgId = t.id;
  out.metaHeader = encodeMeta(metaOf(t, chunkSeqs));
  out.payload = chunked ? '' : payload.toString('base64');
  return out;
}

function errorOf(fn) {
  try {
    fn();
  } catch (err) {
    if (typeof err?.code !== 'string') throw err;
    const out = { code: err.code, message: err.message };
    if (err.details !== undefined) out.details = JSON.parse(JSON.stringify(err.details));
    return out;
  }
  return undefined;
}

function invalidCase(c) {
  c = { ...c, input: throughJson(c.input) };
  const error = errorOf(() => {
    const t = validateTrajectory(c.input, { maxWeightVersion: c.context?.maxWeightVersion });
    if (c.context?.maxTrajectoryBytes !== undefined) checkPayloadSize(t, c.context.maxTrajectoryBytes);
  });
  if (!error) throw new Error(`invalid case "${c.name}" was accepted`);
  return { name: c.name, input: c.input, ...(c.context ? { context: c.context } : {}), error };
}

function bufferNameCase(buffer) {
  const error = errorOf(() => bufferNames(buffer));
  if (error) return { buffer, error };
  const n = bufferNames(buffer);
  return {
    buffer,
    stream: n.stream,
    recordFilter: n.recordFilter,
    allFilter: n.allFilter,
    recordSubject: n.recordSubject('x'),
    chunkSubject: n.chunkSubject('x'),
    doneStream: n.doneStream,
    doneSubject: n.doneSubject('x'),
  };
}

const vectors = {
  about:
    'Experience record v1 and v2 (docs/reference/protocols.md): inputs of a writer and the records or errors they give, from the TypeScript encoder. ' +
    'Regenerate with `node scripts/trajectory-vectors.mjs`; numbers JSON cannot hold are {"$number": "NaN" | "Infinity" | "-Infinity"}.',
  headerRoom: HEADER_ROOM,
  valid: valid.map(validCase),
  invalid: invalid.map(invalidCase),
  bufferNames: bufferNameCases.map(bufferNameCase),
};

const text = `${JSON.stringify(vectors, tagged, 2)}\n`;

if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(target, 'utf8');
  } catch {
    // missing: not current
  }
  if (current !== text) {
    process.stderr.write(`${target} is not what the encoder writes: run node scripts/trajectory-vectors.mjs\n`);
    process.exit(1);
  }
} else {
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(target, text);
  process.stdout.write(`wrote ${target}: ${vectors.valid.length} valid, ${vectors.invalid.length} invalid, ${vectors.bufferNames.length} buffer names\n`);
}
