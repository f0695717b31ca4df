import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Relay } from '../../src/relay/daemon.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { PROTOCOL_VERSION } from '../../src/relay/protocol/messages.js';
import { RawClient, inProcessRelay, metricValue, metricsText, publishVisible, tempShmDir } from '../helpers/relay.js';

describe('relay: bad input never hurts the relay or other clients', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relay: Relay;
  let bystander: RelayClient;

  beforeAll(async () => {
    tmp = tempShmDir();
    relay = await inProcessRelay(tmp.dir, { maxFrameBytes: 1024 * 1024 });
    bystander = await RelayClient.connect({ socketPath: relay.options.socketPath });
    await publishVisible(bystander, { model: 'm', version: 1, tensors: [{ name: 'w', dtype: 'U8', shape: [8], data: new Uint8Array(8).fill(1) }] });
  });
  afterAll(async () => {
    bystander.close();
    await relay.close();
    tmp.cleanup();
  });

  async function greeted(): Promise<RawClient> {
    const raw = await RawClient.connect(relay.options.socketPath);
    raw.send({ id: 1, op: 'hello', protocol: PROTOCOL_VERSION });
    expect(await raw.next()).toMatchObject({ id: 1, ok: true });
    return raw;
  }

  async function expectStillServing(): Promise<void> {
    const lease = await bystander.acquire({ model: 'm' });
    expect(lease.bytes('w')[0]).toBe(1);
    await lease.release();
  }

  it('closes a connection that announces an oversized frame, after an error frame', async () => {
    const raw = await greeted();
    const head = Buffer.alloc(4);
    head.writeUInt32BE(64 * 1024 * 1024);
    raw.write(head);
    expect(await raw.next()).toMatchObject({ id: null, ok: false, error: { code: 'ERR_FRAME_TOO_LARGE' } });
    expect(await raw.waitClosed()).toBe(true);
    await expectStillServing();
  });

  it('closes a connection that sends garbage or a non-request', async () => {
    for (const bytes of [Buffer.from([0, 0, 0, 2, 0x92, 0x01]), Buffer.from([0, 0, 0, 1, 0xc1])]) {
      const raw = await greeted();
      raw.write(bytes);
      const msg = (await raw.next()) as { error?: { code: string } } | null;
      expect(msg?.error?.code).toBe('ERR_BAD_FRAME');
      expect(await raw.waitClosed()).toBe(true);
    }
    const raw = await greeted();
    raw.send(['not', 'a', 'request']);
    expect(await raw.next()).toMatchObject({ ok: false, error: { code: 'ERR_BAD_FRAME' } });
    expect(await raw.waitClosed()).toBe(true);
    await expectStillServing();
  });

  it('requires the handshake first and refuses other protocol versions', async () => {
    let raw = await RawClient.connect(relay.options.socketPath);
    raw.send({ id: 1, op: 'status' });
    expect(await raw.next()).toMatchObject({ ok: false, error: { code: 'ERR_HANDSHAKE_REQUIRED' } });
    expect(await raw.waitClosed()).toBe(true);
    raw = await RawClient.connect(relay.options.socketPath);
    raw.send({ id: 1, op: 'hello', protocol: PROTOCOL_VERSION + 1 });
    expect(await raw.next()).toMatchObject({ id: 1, ok: false, error: { code: 'ERR_PROTOCOL_VERSION' } });
    expect(await raw.waitClosed()).toBe(true);
  });

  it('answers invalid requests with typed errors and keeps the connection', async () => {
    const raw = await greeted();
    const cases: [Record<string, unknown>, string][] = [
      [{ op: 'frobnicate' }, 'ERR_UNKNOWN_OP'],
      [{ op: 'acquire' }, 'ERR_BAD_REQUEST'],
      [{ op: 'acquire', model: 'nope' }, 'ERR_UNKNOWN_MODEL'],
      [{ op: 'acquire', model: 'm', version: 99 }, 'ERR_UNKNOWN_VERSION'],
      [{ op: 'acquire', model: 'm', version: -1 }, 'ERR_BAD_VERSION'],
      [{ op: 'acquire', model: '', version: 1 }, 'ERR_BAD_MODEL_ID'],
      [{ op: 'release', lease: 12345 }, 'ERR_UNKNOWN_LEASE'],
      [{ op: 'begin', model: 'x', version: 1, tensors: [{ name: 'a', dtype: 'F99', shape: [1] }] }, 'ERR_BAD_DTYPE'],
      [{ op: 'begin', model: 'x', version: 1, tensors: [{ name: 'a', dtype: 'F32', shape: [-4] }] }, 'ERR_BAD_SHAPE'],
      [{ op: 'begin', model: 'x', version: 1, tensors: [{ name: 'a', dtype: 'F32', shape: [2 ** 31, 2 ** 31, 2 ** 31] }] }, 'ERR_BAD_SHAPE'],
      [
        {
          op: 'begin',
          model: 'x',
          version: 1,
          tensors: [
            { name: 'a', dtype: 'F32', shape: [1] },
            { name: 'a', dtype: 'F32', shape: [1] },
          ],
        },
        'ERR_DUPLICATE_TENSOR',
      ],
      [{ op: 'begin', model: 'x', version: 1.5, tensors: [] }, 'ERR_BAD_VERSION'],
      [{ op: 'commit', model: 'm', version: 1 }, 'ERR_NOT_WRITING'],
      [{ op: 'written', model: 'nope', version: 1, tensors: [] }, 'ERR_UNKNOWN_MODEL'],
      [{ op: 'attach', segment: '../../etc/passwd' }, 'ERR_BAD_SEGMENT_NAME'],
      [{ op: 'attach', segment: '/etc/passwd' }, 'ERR_BAD_SEGMENT_NAME'],
      [{ op: 'attach', segment: '..' }, 'ERR_BAD_SEGMENT_NAME'],
      [{ op: 'adopt', model: 'x', version: 1, path: '/nonexistent/ckpt' }, 'ERR_BAD_SAFETENSORS'],
    ];
    let id = 10;
    for (const [req, code] of cases) {
      raw.send({ id: ++id, ...req });
      expect(await raw.next(), JSON.stringify(req)).toMatchObject({ id, ok: false, error: { code } });
    }
    raw.send({ id: 99, op: 'status' });
    expect(await raw.next()).toMatchObject({ id: 99, ok: true });
    raw.close();
    const text = await metricsText(relay.metricsPort!);
    expect(metricValue(text, 'laminar_relay_errors_total', 'code="ERR_BAD_SEGMENT_NAME"')).toBeGreaterThanOrEqual(3);
    expect(metricValue(text, 'laminar_relay_errors_total', 'code="ERR_BAD_DTYPE"')).toBeGreaterThanOrEqual(1);
    await expectStillServing();
  });

  it('refuses writes for tensors the version does not have', async () => {
    const pub = await bystander.beginPublish({ model: 'm', version: 2, tensors: [{ name: 'w', dtype: 'U8', shape: [8] }] });
    await expect(bystander.request('written', { model: 'm', version: 2, tensors: [{ name: 'ghost' }] })).rejects.toMatchObject({ code: 'ERR_UNKNOWN_TENSOR' });
    await expect(bystander.request('written', { model: 'm', version: 2, tensors: [{ name: 'w', checksum: 'xyz' }] })).rejects.toMatchObject({
      code: 'ERR_BAD_REQUEST',
    });
    expect(() => pub.write('w', new Uint8Array(7))).toThrow(expect.objectContaining({ code: 'ERR_BAD_TENSOR' }));
    await pub.abort();
    await expectStillServing();
  });
});
