/**
 * The rollout agent's claim rule (src/rollout/claim-policy.ts), which `laminar rollout-agent`'s
 * serve loop and the cluster simulator's laminar rollouts both call: batch mode claims only into
 * an empty engine, continuous mode refills as trajectories finish, in claims of a quarter of its
 * room at least, and never past a newer version.
 */
import { describe, expect, it } from 'vitest';
import { mustEmptyFirst, promptsToClaim } from '../../src/rollout/claim-policy.js';

const batch = { batchPrompts: 64, maxInFlight: 0 };
const continuous = { batchPrompts: 64, maxInFlight: 1024 };

describe('batch mode (--max-in-flight 0)', () => {
  it('claims nothing new while anything generates, with or without a newer version', () => {
    expect(mustEmptyFirst(batch, 1, false)).toBe(true);
    expect(mustEmptyFirst(batch, 1000, true)).toBe(true);
  });

  it('claims a whole batch into an empty engine', () => {
    expect(mustEmptyFirst(batch, 0, false)).toBe(false);
    expect(mustEmptyFirst(batch, 0, true)).toBe(false);
    expect(promptsToClaim(batch, 0, 16)).toBe(64);
  });
});

describe('continuous mode (--max-in-flight N)', () => {
  it('goes on claiming while trajectories run, unless a newer version waits', () => {
    expect(mustEmptyFirst(continuous, 500, false)).toBe(false);
    expect(mustEmptyFirst(continuous, 500, true)).toBe(true);
    expect(mustEmptyFirst(continuous, 0, true)).toBe(false);
  });

  it('fills an empty engine up to the batch, and refills by whole prompts once a quarter of the room is free', () => {
    expect(promptsToClaim(continuous, 0, 16)).toBe(64);
    // 1,024 − 800 = 224 free: below a quarter (256), wait for more to finish.
    expect(promptsToClaim(continuous, 800, 16)).toBe(0);
    // 256 free: 16 prompts of 16.
    expect(promptsToClaim(continuous, 768, 16)).toBe(16);
    // 300 free: 18 whole prompts (288 samples), never past maxInFlight.
    expect(promptsToClaim(continuous, 724, 16)).toBe(18);
    expect(promptsToClaim({ batchPrompts: 4, maxInFlight: 1024 }, 0, 16)).toBe(4);
  });

  it('needs room for one whole prompt at least, and claims nothing past a full engine', () => {
    expect(promptsToClaim({ batchPrompts: 8, maxInFlight: 8 }, 0, 16)).toBe(0);
    expect(promptsToClaim({ batchPrompts: 8, maxInFlight: 32 }, 16, 16)).toBe(1);
    expect(promptsToClaim(continuous, 1100, 16)).toBe(0);
  });

  it('with tool calls: those at tools leave room at the engine, and owned stays within maxInFlight + maxAtTools', () => {
    const tools = { batchPrompts: 8, maxInFlight: 8, maxAtTools: 8 };
    // 8 owned, all at tools: the engine is empty, 8 more may be claimed.
    expect(promptsToClaim(tools, 0, 1, 8)).toBe(8);
    // 16 owned (8 at tools, 8 generating): nothing more.
    expect(promptsToClaim(tools, 8, 1, 16)).toBe(0);
    // 14 owned, all at tools: room at the engine for 8, but only 2 under the bound.
    expect(promptsToClaim(tools, 0, 1, 14)).toBe(2);
    // 15 owned: 1 under the bound, below the quarter a claim fills at least.
    expect(promptsToClaim(tools, 0, 1, 15)).toBe(0);
    // Without maxAtTools the bound is maxInFlight itself, as before.
    expect(promptsToClaim({ batchPrompts: 8, maxInFlight: 8 }, 0, 1, 8)).toBe(0);
  });
});
