/** The prompt pool's Redis address forms (parseRedisAddress): what each means, and what is refused. */
import { describe, expect, it } from 'vitest';
import { maskPassword, parseRedisAddress } from '../../src/data/prompts/redis-address.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const none = { replicas: 0, timeoutMs: 1000 };

/** The error parseRedisAddress throws for `address`. */
function refusal(address: string): { code?: string; message: string } {
  try {
    parseRedisAddress(address);
  } catch (err) {
    return err as { code?: string; message: string };
  }
  throw new Error(`${address} was accepted`);
}

describe('parseRedisAddress', () => {
  it('one server: the URL as ioredis reads it, without our parameters', () => {
    expect(parseRedisAddress('redis://10.0.0.5:6379')).toEqual({ kind: 'server', url: 'redis://10.0.0.5:6379', replication: none });
    expect(parseRedisAddress('rediss://:pw@h:6380/2?replicas=1&family=6')).toEqual({
      kind: 'server',
      url: 'rediss://:pw@h:6380/2?family=6',
      replication: { replicas: 1, timeoutMs: 1000 },
    });
  });

  it('Sentinel: the sentinels (26379 by default), the master name, a database and passwords', () => {
    expect(parseRedisAddress('redis+sentinel://a:26380,b,[::1]:1/mymaster')).toEqual({
      kind: 'sentinel',
      sentinels: [
        { host: 'a', port: 26380 },
        { host: 'b', port: 26379 },
        { host: '::1', port: 1 },
      ],
      masterName: 'mymaster',
      db: 0,
      replication: none,
    });
    expect(parseRedisAddress('redis+sentinel://:p%40ss@s1:5000/m/3?sentinelPassword=x&replicas=2&replicaTimeoutMs=250')).toEqual({
      kind: 'sentinel',
      sentinels: [{ host: 's1', port: 5000 }],
      masterName: 'm',
      db: 3,
      password: 'p@ss',
      sentinelPassword: 'x',
      replication: { replicas: 2, timeoutMs: 250 },
    });
  });

  it('Cluster: the seed nodes', () => {
    expect(parseRedisAddress('redis+cluster://n1:7000,n2:7001')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: 'n1', port: 7000 },
        { host: 'n2', port: 7001 },
      ],
      replication: none,
    });
  });

  it.each([
    ['http://h:1', 'unknown scheme'],
    ['h:6379', 'expected redis://'],
    ['redis+sentinel://s1:1', 'master name'],
    ['redis+sentinel://s1:1/m/x', 'database'],
    ['redis+sentinel://s1:99999/m', 'outside 1-65535'],
    ['redis+cluster://n1:1/0', 'no database'],
    ['redis+cluster://n1:1,,n2:2', 'host[:port]'],
    ['redis://h:1?replicas=-1', 'replicas=-1'],
    ['redis://h:1?replicaTimeoutMs=0', 'replicaTimeoutMs=0'],
  ])('refuses %s with ERR_BAD_REDIS_URL', (address, why) => {
    const err = refusal(address);
    expect(err.code).toBe(ErrorCodes.BAD_REDIS_URL);
    expect(err.message).toContain(why);
  });

  it('masks the password in what it prints', () => {
    expect(maskPassword('redis+sentinel://:secret@a,b/m')).toBe('redis+sentinel://:***@a,b/m');
    expect(maskPassword('redis://user:secret@h:1')).toBe('redis://user:***@h:1');
    expect(maskPassword('redis://h:1')).toBe('redis://h:1');
    expect(refusal('redis+sentinel://:secret@a:1').message).not.toContain('secret');
  });
});
