/**
 * Independent, labelled random streams from one scenario seed. Every draw of the simulator
 * belongs to a purpose (prompt lengths, output lengths, tool latencies, rewards) and an index
 * (the prompt, the trajectory): its seed is a hash of (seed, purpose, index), so a trajectory's
 * draws do not depend on the order in which anything asked for them, nor on draws added to
 * another purpose later. That is what lets every system of a scenario see the same workload.
 */
import { seededRandom } from '../../common/random.js';

/** MurmurHash3's 32-bit finaliser: every input bit moves every output bit. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** FNV-1a of a purpose's name (computed once per stream, not per draw). */
export function labelHash(label: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < label.length; i++) {
    h ^= label.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The 32-bit seed of draw `index` (an integer >= 0) of the stream `label` under `seed`. */
export function streamSeed(seed: number, label: number, index: number): number {
  const low = index >>> 0;
  const high = Math.floor(index / 2 ** 32) >>> 0;
  let h = fmix32((seed >>> 0) ^ 0x9e3779b9);
  h = fmix32(h ^ label);
  h = fmix32(h ^ low);
  return fmix32(h ^ high ^ 0x27d4eb2f);
}

/** A labelled stream: `draw(index)` is a fresh seeded PRNG for that index, the same every time. */
export function randomStream(seed: number, label: string): (index: number) => () => number {
  const labelSeed = labelHash(label);
  return (index) => seededRandom(streamSeed(seed, labelSeed, index));
}
