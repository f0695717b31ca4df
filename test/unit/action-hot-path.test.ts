/**
 * The pieces of an action's hot path that replace library calls for their cost (the actions
 * bench's profile): the message id header written as bytes (src/actions/msg-id-header.ts) is
 * byte for byte what nats.js's headers() writes; an action's abort signal made only when its
 * handler reads it (src/actions/action-signal.ts) behaves as an AbortController's; the gauges
 * counted by kind and given at scrape (KindCounts, src/actions/metrics.ts) read what inc/dec
 * would have given them, and so do the counters by kind and status (KindStatusCounts); the output cap's short path cuts exactly what the long one cuts.
 */
import { describe, expect, it } from 'vitest';
import { headers, type MsgHdrs } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { ActionSignal } from '../../src/actions/action-signal.js';
import { clientMetrics, KindCounts, KindStatusCounts } from '../../src/actions/metrics.js';
import { msgIdHeader } from '../../src/actions/msg-id-header.js';
import { capOutput } from '../../src/actions/output-cap.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

/** What nats-core's publish writes of a message's headers: their encode() (not in MsgHdrs' public type). */
const bytesOf = (h: MsgHdrs): string => Buffer.from((h as unknown as { encode(): Uint8Array }).encode()).toString('utf8');

describe('the message id header', () => {
  it('writes the bytes nats.js writes', () => {
    for (const id of ['t-1', 'traj-7/turn-3', 'ünïcødé/ключ', `x${'y'.repeat(250)}`, ' padded ']) {
      const theirs = headers();
      theirs.set('Nats-Msg-Id', id);
      expect(bytesOf(msgIdHeader(id))).toBe(bytesOf(theirs));
    }
  });

  it('refuses an id with a line break, as nats.js does', () => {
    for (const id of ['a\r\nNats-Expected-Stream: x', 'a\nb']) {
      expect(() => headers().set('Nats-Msg-Id', id)).toThrow();
      expect(() => msgIdHeader(id)).toThrow(expect.objectContaining({ code: ErrorCodes.BAD_ACTION }));
    }
  });
});

describe("an action's abort signal", () => {
  it('is made aborted when first read after the abort, with the first reason', () => {
    const s = new ActionSignal();
    const first = new Error('timeout');
    s.abort(first);
    s.abort(new Error('closed'));
    expect(s.aborted).toBe(true);
    expect(s.signal.aborted).toBe(true);
    expect(s.signal.reason).toBe(first);
  });

  it('aborts a signal read before the abort, once', () => {
    const s = new ActionSignal();
    const signal = s.signal;
    const reasons: unknown[] = [];
    signal.addEventListener('abort', () => reasons.push(signal.reason));
    expect(signal.aborted).toBe(false);
    const reason = new Error('timeout');
    s.abort(reason);
    s.abort(new Error('closed'));
    expect(reasons).toEqual([reason]);
    expect(s.signal).toBe(signal);
  });
});

describe('gauges counted by kind', () => {
  it('read, at scrape, the sum of what every owner counted; a closed owner leaves its last count', async () => {
    const registry = new Registry();
    const gauge = clientMetrics(registry).inFlight;
    const a = new KindCounts(gauge);
    const b = new KindCounts(clientMetrics(registry).inFlight);
    a.add('python', 3);
    a.add('python', -1);
    b.add('python', 1);
    b.add('search', 4);
    const read = async (): Promise<Record<string, number>> => {
      const values = (await registry.getSingleMetric('laminar_action_in_flight')!.get()).values;
      return Object.fromEntries(values.map((v) => [String(v.labels.kind), v.value]));
    };
    expect(await read()).toEqual({ python: 3, search: 4 });
    b.add('search', -4);
    a.add('python', -2);
    a.close();
    a.add('python', 5); // after close: no longer given
    expect(await read()).toEqual({ python: 1, search: 0 });
  });
});

describe('counters counted by kind and status', () => {
  it('read, at scrape, what inc() per action would have given them, across owners and scrapes', async () => {
    const registry = new Registry();
    const a = new KindStatusCounts(clientMetrics(registry).results);
    const b = new KindStatusCounts(clientMetrics(registry).results);
    const read = async (): Promise<Record<string, number>> => {
      const values = (await registry.getSingleMetric('laminar_action_results_total')!.get()).values;
      return Object.fromEntries(values.map((v) => [`${v.labels.kind}/${v.labels.status}`, v.value]));
    };
    for (let i = 0; i < 3; i++) a.add('python', 'ok');
    a.add('python', 'timeout');
    b.add('python', 'ok');
    b.add('search', 'error');
    expect(await read()).toEqual({ 'python/ok': 4, 'python/timeout': 1, 'search/error': 1 });
    // A second scrape adds only what came since the first.
    a.add('search', 'error');
    expect(await read()).toEqual({ 'python/ok': 4, 'python/timeout': 1, 'search/error': 2 });
    b.add('python', 'ok');
    b.close();
    b.add('python', 'ok'); // after close: no longer given
    expect(await read()).toEqual({ 'python/ok': 5, 'python/timeout': 1, 'search/error': 2 });
  });
});

describe('the output cap', () => {
  it('keeps short outputs whole and cuts long ones to the byte limit', () => {
    expect(capOutput('abc', 64)).toEqual({ output: 'abc', truncated: false });
    // 30 characters of 3 bytes: 90 bytes, cut.
    const wide = '€'.repeat(30);
    const cut = capOutput(wide, 64);
    expect(cut.truncated).toBe(true);
    expect(Buffer.byteLength(cut.output)).toBeLessThanOrEqual(64);
    // 20 of them = 60 bytes: more units than a third of the limit, still whole.
    expect(capOutput('€'.repeat(20), 64)).toEqual({ output: '€'.repeat(20), truncated: false });
  });
});
