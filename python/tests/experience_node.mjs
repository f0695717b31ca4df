// The TypeScript side of the Python experience-buffer tests, from dist/ (build it first):
//
//   node experience_node.mjs encode                      stdin: [TrajectoryInput...]
//       -> [{subject, metaHeader, payload (base64)} | {error: {code, message}}]   (no server)
//   node experience_node.mjs js-strings                  stdin: [number...] -> [String(x)...]
//   node experience_node.mjs write <nats-url> <buffer>   stdin: [TrajectoryInput...]
//       -> [{seq, duplicate, chunks} | {error: {code, message}}], written one after the other
//   node experience_node.mjs sample <nats-url> <buffer> <count>
//       -> [{seq, id, promptId, ..., tokens (base64 of int32 LE), logprobs (base64 of float32 LE)}]
//          every item of one FIFO batch of <count> sampled by ExperienceSampler
//
// Inputs are JSON: tokens and logprobs as number arrays. Prints one JSON line.
import { connect } from '@nats-io/transport-node';
import { ExperienceSampler, ExperienceWriter, bufferNames, validateTrajectory } from '../../dist/src/data/index.js';
import { encodeMeta, metaOf } from '../../dist/src/data/codec/record-meta.js';
import { encodePayload } from '../../dist/src/data/codec/payload.js';

async function stdinJson() {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return JSON.parse(text);
}

const errorOf = (err) => ({ error: { code: err.code, message: err.message } });
const b64 = (a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

const [command, url, buffer, count] = process.argv.slice(2);
let out;
if (command === 'encode') {
  out = (await stdinJson()).map((input) => {
    try {
      const t = validateTrajectory(input);
      return {
        subject: bufferNames().recordSubject(t.id),
        metaHeader: encodeMeta(metaOf(t, [])),
        payload: Buffer.from(encodePayload(t.tokens, t.logprobs)).toString('base64'),
      };
    } catch (err) {
      return errorOf(err);
    }
  });
} else if (command === 'js-strings') {
  out = (await stdinJson()).map(String);
} else if (command === 'write') {
  const inputs = await stdinJson();
  const nc = await connect({ servers: url });
  const writer = await ExperienceWriter.open({ nc, buffer });
  out = [];
  for (const input of inputs) out.push(await writer.write(input).catch(errorOf));
  await nc.drain();
} else if (command === 'sample') {
  const nc = await connect({ servers: url });
  const sampler = await ExperienceSampler.open({ nc, buffer, batchSize: Number(count), prefetch: false });
  const batch = await sampler.sample({ timeoutMs: 30_000 });
  out = batch.items.map(({ tokens, logprobs, staleness, timesSampled, ...meta }) => ({ ...meta, tokens: b64(tokens), logprobs: b64(logprobs) }));
  batch.release();
  await sampler.close();
  await nc.drain();
} else {
  throw new Error(`unknown command ${command}`);
}
process.stdout.write(`${JSON.stringify(out)}\n`);
