/**
 * A partial log's read goes on until it has the message the stream's leader named
 * (src/data/partial/log-reader.ts). The consumer here is a stand-in for one nats-server placed on
 * a replica that is still applying what it missed: its pulls deliver what that replica holds, and
 * the rest later. On a real cluster that placement is nats-server's random choice, so
 * test/cluster-nats/cluster-restart meets it only now and then.
 */
import { describe, expect, it } from 'vitest';
import type { Consumer, JsMsg } from '@nats-io/jetstream';
import { encodeLog, LOG_VERSION, type LogMessage } from '../../src/data/partial/log-codec.js';
import { readLogFrom } from '../../src/data/partial/log-reader.js';

const start = { trajectoryId: 't', promptId: 'p', groupId: 'g', sampleIndex: 0, groupSize: 1, weightVersion: 3 };

function delta(offset: number, tokens: number[]): LogMessage {
  return {
    v: LOG_VERSION,
    kind: 'delta',
    owner: 'r1',
    offset,
    tokens: new Uint8Array(Int32Array.from(tokens).buffer),
    logprobs: new Uint8Array(new Float32Array(tokens.length).buffer),
  };
}

/** The log: a start at sequence 1, then [1, 2, 3] at 2 and [4] at 3. */
const log: JsMsg[] = [{ v: LOG_VERSION, kind: 'start', owner: 'r1', offset: 0, start } as LogMessage, delta(0, [1, 2, 3]), delta(3, [4])].map(
  (m, i) => ({ seq: i + 1, data: encodeLog(m), info: { timestampNanos: 1e15 } }) as unknown as JsMsg,
);

/** A consumer whose pulls deliver `pulls[i]` messages of the log in turn, and whose info counts the first. */
function consumerOnReplica(pulls: number[]): { consumer: Consumer; pulled: () => number } {
  let next = 0;
  let pull = 0;
  const consumer = {
    info: () => Promise.resolve({ num_pending: pulls[0] ?? 0 }),
    fetch: () => {
      const messages = log.slice(next, next + (pulls[pull++] ?? 0));
      next += messages.length;
      return Promise.resolve(
        Object.assign(
          (function* () {
            yield* messages;
          })(),
          { close: () => Promise.resolve() },
        ),
      );
    },
  } as unknown as Consumer;
  return { consumer, pulled: () => pull };
}

describe('readLogFrom', () => {
  it('reads on past what the replica held at first, to the message the leader named', async () => {
    // The replica holds the start and [1, 2, 3]; [4] arrives a pull later, after one empty pull.
    const { consumer, pulled } = consumerOnReplica([2, 0, 1]);
    let asked = 0;
    const state = await readLogFrom(consumer, 'sub', 3, () => {
      asked++;
      return Promise.resolve({ seq: 3 });
    });
    expect(Array.from(state!.tokens)).toEqual([1, 2, 3, 4]);
    expect([state!.lastSeq, pulled(), asked]).toEqual([3, 3, 1]);
  });

  it('is undefined when the leader no longer holds the log (completed while it was read)', async () => {
    const { consumer } = consumerOnReplica([2, 0]);
    expect(await readLogFrom(consumer, 'sub', 3, () => Promise.resolve(null))).toBeUndefined();
  });
});
