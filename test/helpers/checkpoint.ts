/** Writes a plain .safetensors file (as a trainer's checkpoint would be) from in-memory tensors. */
import { closeSync, openSync, writeSync } from 'node:fs';

export function writeCheckpoint(path: string, tensors: { name: string; dtype: string; shape: number[]; data: Uint8Array }[]): string {
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(json.length));
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, prefix);
    writeSync(fd, Buffer.from(json));
    for (const t of tensors) writeSync(fd, t.data);
  } finally {
    closeSync(fd);
  }
  return path;
}
