/**
 * Small helpers of the control bench: GETs of text and JSON from a manager's HTTP port, polling
 * until a condition holds (with a deadline that names what did not happen), and a fraction of a
 * core as a percentage for the table.
 */
import { get } from 'node:http';
import { delay } from '../../src/common/concurrency.js';

export function httpText(port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get({ host: '127.0.0.1', port, path, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${path}: HTTP ${res.statusCode}`))));
    });
    req.once('error', reject);
    req.once('timeout', () => req.destroy(new Error(`${path}: timeout`)));
  });
}

export async function httpJson(port: number, path: string): Promise<unknown> {
  return JSON.parse(await httpText(port, path)) as unknown;
}

export async function until(test: () => Promise<boolean>, timeoutMs: number, what: string, everyMs = 100): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await test())) {
    if (performance.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms`);
    await delay(everyMs);
  }
}

export function pct(x: number): string {
  return `${(x * 100).toFixed(1)} %`;
}
