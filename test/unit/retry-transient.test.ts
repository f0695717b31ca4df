/** Which JetStream failures the data module retries (src/data/retry.ts). */
import { describe, expect, it } from 'vitest';
import { JetStreamApiError } from '@nats-io/jetstream';
import { isTransient, retryTransient } from '../../src/data/retry.js';

/**
 * What @nats-io/jetstream throws when a publish gets "no responders": its JetStreamNotEnabled
 * (not exported by the package) with the RequestError as the cause (jsclient.js, _publish).
 */
function noResponders(): Error {
  const cause = Object.assign(new Error("no responders: 'laminar.exp.b.t.x'"), { name: 'RequestError' });
  return Object.assign(new Error('jetstream is not enabled', { cause }), { name: 'JetStreamNotEnabled' });
}

describe('isTransient', () => {
  it('retries "no responders" under its JetStream name: a stream between two leaders on a cluster', async () => {
    expect(isTransient(noResponders())).toBe(true);
    let calls = 0;
    const value = await retryTransient(() => (++calls < 3 ? Promise.reject(noResponders()) : Promise.resolve('stored')));
    expect([value, calls]).toEqual(['stored', 3]);
  });

  it('retries "cluster not available": a read from the leader while the stream has none', () => {
    expect(isTransient(new JetStreamApiError({ code: 503, err_code: 10008, description: 'JetStream system temporarily unavailable' }))).toBe(true);
  });

  it("does not retry the server's answers, nor a closed connection", () => {
    expect(isTransient(new JetStreamApiError({ code: 503, err_code: 10077, description: 'maximum bytes exceeded' }))).toBe(false);
    expect(isTransient(Object.assign(new Error('closed'), { name: 'ClosedConnectionError' }))).toBe(false);
  });
});
