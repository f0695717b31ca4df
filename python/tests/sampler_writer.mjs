// Writes deterministic trajectories into an experience buffer with the TypeScript writer, for the
// Python sampler tests and benchmark (python/tests/sampler_support.py knows the same formulas).
//
//   node sampler_writer.mjs '{"nats": URL, "buffer": "b", "from": 0, "count": 8, "tokens": 40,
//                             "groupSize": 1, "weightVersion": 0, "concurrency": 16}'
//
// Trajectory `seed` (from .. from+count-1): id t<seed>, tokens[k] = seed*1000 + k,
// logprobs[k] = -(seed + k/1000) (float32), reward seed/2, group g<floor(seed/groupSize)> with
// sample index seed % groupSize, info {seed}. `tokens` may be a list: trajectory i gets
// tokens[i % len]. Prints one JSON line: {"written": [ids], "chunks": total chunks}.
import { connect } from '@nats-io/transport-node';
import { ExperienceWriter } from '../../dist/src/data/index.js';

const spec = JSON.parse(process.argv[2]);
const nc = await connect({ servers: spec.nats });
const writer = await ExperienceWriter.open({ nc, buffer: spec.buffer });
const groupSize = spec.groupSize ?? 1;
const lengths = Array.isArray(spec.tokens) ? spec.tokens : [spec.tokens];
const seeds = Array.from({ length: spec.count }, (_, i) => (spec.from ?? 0) + i);
const written = [];
let chunks = 0;
let next = 0;
async function worker() {
  while (next < seeds.length) {
    const i = next++;
    const seed = seeds[i];
    const n = lengths[i % lengths.length];
    const r = await writer.write({
      id: `t${seed}`,
      promptId: `p${Math.floor(seed / groupSize)}`,
      groupId: `g${Math.floor(seed / groupSize)}`,
      sampleIndex: seed % groupSize,
      groupSize,
      weightVersion: spec.weightVersion ?? 0,
      reward: seed / 2,
      tokens: Int32Array.from({ length: n }, (_, k) => seed * 1000 + k),
      logprobs: Float32Array.from({ length: n }, (_, k) => -(seed + k / 1000)),
      promptLength: Math.min(4, n),
      responseLength: n - Math.min(4, n),
      info: { seed },
    });
    chunks += r.chunks;
    written[i] = `t${seed}`;
  }
}
await Promise.all(Array.from({ length: spec.concurrency ?? 16 }, worker));
await nc.drain();
process.stdout.write(`${JSON.stringify({ written, chunks })}\n`);
