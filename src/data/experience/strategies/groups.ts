/**
 * Whole GRPO groups: a group is sampleable only once all its n samples are in the buffer, and a
 * batch is made of whole groups (its size is a sum of group sizes). Groups go oldest-completed
 * first, or at random with `order: 'uniform'`.
 */
import type { BufferEntry } from '../entry.js';
import type { SamplingStrategy } from './strategy.js';

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

export function wholeGroups(options: { order?: 'fifo' | 'uniform' } = {}): SamplingStrategy {
  return {
    name: `whole-groups(${options.order ?? 'fifo'})`,
    select(c, n, ctx) {
      const avail = new Map<string, BufferEntry[]>();
      for (const e of c) {
        const list = avail.get(e.groupId);
        if (list) list.push(e);
        else avail.set(e.groupId, [e]);
      }
      // Complete groups whose members are all available, ordered by their newest member.
      const complete: Array<{ members: BufferEntry[]; last: number }> = [];
      for (const [gid, members] of avail) {
        const g = ctx.groups.get(gid);
        if (g && members.length === g.size) complete.push({ members, last: Math.max(...members.map((m) => m.seq)) });
      }
      complete.sort((a, b) => a.last - b.last);
      if (options.order === 'uniform') {
        for (let i = complete.length - 1; i > 0; i--) {
          const j = Math.floor(ctx.random() * (i + 1));
          [complete[i], complete[j]] = [complete[j]!, complete[i]!];
        }
      }
      const out: BufferEntry[] = [];
      for (const g of complete) {
        if (out.length + g.members.length <= n) out.push(...g.members.sort((a, b) => a.sampleIndex - b.sampleIndex));
        if (out.length === n) return out;
      }
      return [];
    },
    impossible(n, ctx) {
      const sizes = new Set<number>();
      for (const g of ctx.groups.values()) sizes.add(g.size);
      if (sizes.size === 0) return undefined;
      const d = [...sizes].reduce(gcd);
      if (n % d !== 0) return `a batch of ${n} cannot be made of whole groups of sizes ${[...sizes].sort((a, b) => a - b).join(', ')}`;
      return undefined;
    },
  };
}
