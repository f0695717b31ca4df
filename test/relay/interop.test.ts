import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Relay } from '../../src/relay/daemon.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { CLI, inProcessRelay, publishVisible, tempShmDir } from '../helpers/relay.js';

// Python with numpy only (Debian's python3-numpy): parse the safetensors header, map the
// tensors and print what it read, so that the test compares bytes with what was published.
const READER = `
import json, mmap, struct, sys
import numpy as np
path = sys.argv[1]
with open(path, 'rb') as f:
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
n = struct.unpack('<Q', mm[:8])[0]
header = json.loads(mm[8:8 + n])
meta = header.pop('__metadata__')
base = 8 + n
dt = {'F32': np.float32, 'I64': np.int64, 'BF16': np.uint16, 'U8': np.uint8, 'F64': np.float64}
out = {'meta': meta, 'tensors': {}}
for name, t in header.items():
    b, e = t['data_offsets']
    arr = np.frombuffer(mm, dtype=dt[t['dtype']], count=(e - b) // np.dtype(dt[t['dtype']]).itemsize, offset=base + b).reshape(t['shape'])
    out['tensors'][name] = {'shape': list(arr.shape), 'sum': float(arr.astype(np.float64).sum()), 'first': arr.reshape(-1)[:3].tolist(), 'aligned': (base + b) % 64 == 0 or (e - b) == 0}
print(json.dumps(out))
`;

describe('interop: what the relay holds is a safetensors file any framework can map', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relay: Relay;
  beforeAll(async () => {
    tmp = tempShmDir();
    relay = await inProcessRelay(tmp.dir);
  });
  afterAll(async () => {
    await relay.close();
    tmp.cleanup();
  });

  it('is read by Python with only numpy, byte for byte', async () => {
    const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    const w = Float32Array.from({ length: 6 * 5 }, (_, i) => i / 4);
    const ids = BigInt64Array.from({ length: 7 }, (_, i) => BigInt(i) * 1_000_000_007n);
    const bf16 = Uint16Array.from({ length: 16 }, (_, i) => 0x3f80 + i);
    await publishVisible(client, {
      model: 'org/py',
      version: 4,
      tensors: [
        { name: 'w', dtype: 'F32', shape: [6, 5], data: w },
        { name: 'ids', dtype: 'I64', shape: [7], data: ids },
        { name: 'h', dtype: 'BF16', shape: [4, 4], data: bf16 },
      ],
    });
    const lease = await client.acquire({ model: 'org/py' });
    const out = JSON.parse(execFileSync('/usr/bin/python3', ['-c', READER, lease.description.path], { encoding: 'utf8' })) as {
      meta: Record<string, string>;
      tensors: Record<string, { shape: number[]; sum: number; first: number[] }>;
    };
    expect(out.meta['laminar.model']).toBe('org/py');
    expect(out.meta['laminar.version']).toBe('4');
    expect(out.meta['laminar.chunks']).toBe(lease.description.checksums!.join(','));
    expect(out.tensors.w).toMatchObject({ shape: [6, 5], sum: w.reduce((a, b) => a + b, 0), first: [0, 0.25, 0.5] });
    expect(out.tensors.ids).toMatchObject({ shape: [7], first: [0, 1000000007, 2000000014] });
    expect(out.tensors.h).toMatchObject({ shape: [4, 4], first: [0x3f80, 0x3f81, 0x3f82] });
    await lease.release();
    client.close();
  });

  // Asynchronous exec: the relay under test lives in this process's event loop.
  const run = promisify(execFile);

  it('publishes a safetensors file written elsewhere through `laminar publish`', async () => {
    // A file as Python's safetensors would write it (8-byte length, JSON, data).
    const dir = mkdtempSync(join(tmp.dir, 'ckpt-'));
    const data = Buffer.alloc(4 * 8);
    for (let i = 0; i < 8; i++) data.writeFloatLE(i * 1.5, i * 4);
    const header = Buffer.from(JSON.stringify({ __metadata__: { format: 'pt' }, x: { dtype: 'F32', shape: [2, 4], data_offsets: [0, 32] } }));
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const file = join(dir, 'model.safetensors');
    writeFileSync(file, Buffer.concat([len, header, data]));
    const { stdout } = await run(process.execPath, [CLI, 'publish', file, '--model', 'org/cli', '--version', '2', '--socket', relay.options.socketPath]);
    expect(stdout).toMatch(/published org\/cli v2: 1 tensors/);
    const { stdout: listing } = await run(process.execPath, [CLI, 'versions', '--socket', relay.options.socketPath]);
    expect(listing).toMatch(/org\/cli\s+2\s+complete/);
    const bad = await run(process.execPath, [
      CLI,
      'publish',
      join(dir, 'nope.safetensors'),
      '--model',
      'x',
      '--version',
      '1',
      '--socket',
      relay.options.socketPath,
    ]).then(
      () => '',
      (err: unknown) => {
        const e = err as { stderr: string; code: number };
        return `${e.code} ${e.stderr}`;
      },
    );
    expect(bad).toMatch(/^1 laminar: ERR_BAD_SAFETENSORS/);
  });
});
