import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestbed, type Testbed } from '../helpers/testbed.js';

// A TCP sink in one namespace and a sender in another, both plain Node.
const SINK = `const s=require('net').createServer(c=>{let n=0;c.on('data',d=>n+=d.length);c.on('end',()=>{c.end(String(n))})});s.listen(7000,'0.0.0.0',()=>console.log('ready'))`;
const SEND = (addr: string, bytes: number) =>
  `const c=require('net').connect(7000,'${addr}',()=>{const t=Date.now();c.end(Buffer.alloc(${bytes}));c.on('data',d=>{console.log(JSON.stringify({got:Number(d),ms:Date.now()-t}))})})`;

describe('multi-host testbed (network namespaces, veth, tc)', () => {
  let bed: Testbed;
  beforeAll(() => {
    bed = createTestbed('tbtest', 3, { rate: '100mbit', net: '10.77.0' });
  });
  afterAll(() => bed.destroy());

  it('gives each host its own address and links them through the bridge at the configured rate', async () => {
    expect(bed.hosts.map((h) => h.address)).toEqual(['10.77.0.1', '10.77.0.2', '10.77.0.3']);
    const sink = bed.hosts[0]!.spawn(process.execPath, ['-e', SINK], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => sink.stdout!.once('data', () => resolve()));
    try {
      const bytes = 25 * 1024 * 1024;
      const out = execFileSync('ip', ['netns', 'exec', bed.hosts[2]!.netns, process.execPath, '-e', SEND(bed.hosts[0]!.address, bytes)], { encoding: 'utf8' });
      const { got, ms } = JSON.parse(out) as { got: number; ms: number };
      expect(got).toBe(bytes);
      // 25 MiB at 100 Mbit/s needs at least ~2.1 s on the wire: the shaping is in force.
      expect(ms).toBeGreaterThan(1800);
    } finally {
      sink.kill();
    }
  });

  it('takes a host link down and up', () => {
    // Nothing listens on host 2: with its link up a connect is refused at once; with the link
    // down nothing answers and the probe times out.
    const PROBE = (addr: string) =>
      `const c=require('net').connect(7001,'${addr}');c.setTimeout(1500,()=>{console.log('timeout');process.exit(0)});c.on('error',e=>{console.log(e.code);process.exit(0)})`;
    const probe = (): string =>
      execFileSync('ip', ['netns', 'exec', bed.hosts[0]!.netns, process.execPath, '-e', PROBE(bed.hosts[1]!.address)], { encoding: 'utf8' }).trim();
    expect(probe()).toBe('ECONNREFUSED');
    bed.hosts[1]!.link('down');
    try {
      expect(probe()).toBe('timeout');
    } finally {
      bed.hosts[1]!.link('up');
    }
    expect(probe()).toBe('ECONNREFUSED');
  });

  it('builds links with the MTU asked for (jumbo frames) that carry a stream, and refuses a bad one', async () => {
    const jumbo = createTestbed('tbmtu', 2, { rate: '1gbit', mtu: 9000 });
    try {
      const mtuOf = (args: string[]): number => Number(/ mtu (\d+) /.exec(execFileSync('ip', args, { encoding: 'utf8' }))?.[1]);
      for (const host of jumbo.hosts) expect(mtuOf(['-n', host.netns, '-o', 'link', 'show', 'eth0'])).toBe(9000);
      expect(mtuOf(['-o', 'link', 'show', 'lmrb-tbmtu'])).toBe(9000);
      // Both ends of every veth must agree, or frames over 1500 bytes would be dropped and the
      // stream below would stall.
      const sink = jumbo.hosts[0]!.spawn(process.execPath, ['-e', SINK], { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((resolve) => sink.stdout!.once('data', () => resolve()));
      try {
        const bytes = 8 * 1024 * 1024;
        const out = execFileSync('ip', ['netns', 'exec', jumbo.hosts[1]!.netns, process.execPath, '-e', SEND(jumbo.hosts[0]!.address, bytes)], {
          encoding: 'utf8',
          timeout: 20_000,
        });
        expect((JSON.parse(out) as { got: number }).got).toBe(bytes);
      } finally {
        sink.kill();
      }
    } finally {
      jumbo.destroy();
    }
    expect(() => createTestbed('tbmtu', 2, { mtu: 100_000 })).toThrow(/mtu must be 576-65535/);
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toMatch(/lmr-tbmtu-/);
  });

  it('is removed completely by down', () => {
    const other = createTestbed('tbtmp', 2);
    other.destroy();
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toMatch(/lmr-tbtmp-/);
    expect(execFileSync('ip', ['link', 'show'], { encoding: 'utf8' })).not.toMatch(/lmrb-tbtmp/);
  });
});
