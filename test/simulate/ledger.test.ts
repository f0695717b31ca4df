/**
 * The conservation ledger refuses every transition a driver bug would make (a second completion,
 * a consumption of a trajectory never completed, a move of one not generating, a claim twice, a
 * drop of one not in the buffer) with ERR_INTERNAL and the trajectory's id, and its end-of-run
 * audit adds up.
 */
import { describe, expect, it } from 'vitest';
import { ErrorCodes, LaminarError } from '../../src/common/errors.js';
import { Ledger, TrajectoryState } from '../../src/simulate/ledger.js';
import { chainTiming } from '../../src/simulate/fleet/broadcast.js';
import { broadcastTime } from '../../src/relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { tinyScenario } from './tiny-scenario.js';

const refused = (f: () => void, id: number): void => {
  let caught: unknown;
  try {
    f();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(LaminarError);
  expect((caught as LaminarError).code).toBe(ErrorCodes.INTERNAL);
  expect((caught as LaminarError).details?.id).toBe(id);
};

describe('Ledger', () => {
  it('follows a trajectory through claim, a repack move, completion and consumption', () => {
    const ledger = new Ledger();
    for (let id = 0; id < 3000; id++) ledger.claim(id);
    ledger.moveOut(7);
    expect(ledger.stateOf(7)).toBe(TrajectoryState.Moving);
    ledger.moveIn(7);
    ledger.complete(7);
    ledger.complete(8);
    ledger.consume(7);
    ledger.complete(9);
    ledger.drop(9);
    expect(ledger.stateOf(9)).toBe(TrajectoryState.Dropped);
    expect(ledger.check()).toEqual({
      claimed: 3000,
      generating: 2997,
      moving: 0,
      buffered: 1,
      consumed: 1,
      dropped: 1,
      orphaned: 0,
      returned: 0,
      reclaimed: 0,
      transitions: 3007,
    });
  });

  it('refuses a duplicate and a loss at the transition that makes it', () => {
    const ledger = new Ledger();
    ledger.claim(0);
    ledger.claim(1);
    refused(() => ledger.claim(1), 1);
    ledger.complete(0);
    refused(() => ledger.complete(0), 0);
    refused(() => ledger.consume(1), 1);
    refused(() => ledger.moveIn(1), 1);
    ledger.moveOut(1);
    refused(() => ledger.complete(1), 1);
    refused(() => ledger.complete(5), 5);
    refused(() => ledger.claim(-1), -1);
    // Only a buffered trajectory can be dropped, and only once.
    refused(() => ledger.drop(1), 1);
    ledger.drop(0);
    refused(() => ledger.drop(0), 0);
    refused(() => ledger.consume(0), 0);
    expect(ledger.check()).toMatchObject({ claimed: 2, generating: 0, moving: 1, buffered: 0, consumed: 0, dropped: 1 });
  });
});

describe('chainTiming', () => {
  it('is the relays’ chunk model: the relay h hops down holds the version at T(h + 1, k)', () => {
    const s = tinyScenario();
    const t = chainTiming(s, 5);
    const bytes = s.model.weightBytes!;
    const link = { bandwidth: s.hardware.relayLink.bandwidthGBs * 1e9, startup: s.hardware.relayLink.startupUs * 1e-6 };
    expect(t.chunks).toBe(Math.ceil(bytes / 33554432));
    expect(t.completeAfterMs[0]).toBe(0);
    for (let h = 1; h < 5; h++) expect(t.completeAfterMs[h]).toBe(broadcastTime(h + 1, t.chunks, bytes, link) * 1e3);
    // `auto` takes the relays' own choice for a chain of that length.
    const auto = chainTiming(
      tinyScenario((x) => void (x.broadcast = { chunkBytes: 'auto' })),
      5,
    );
    expect(auto.chunkBytes).toBe(chooseChunkSize(bytes, 5, link).chunkSize);
  });
});
