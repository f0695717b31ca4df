/**
 * `--claim-order longest-first` wired through the rollout agent (issue #49), on real processes: a
 * relay, nats-server, redis-server and one reference engine. The pool's own ordering is
 * test/data/prompt-pool-claim-order.test.ts's; here, that the agent records the length of every
 * trajectory it finishes (its output tokens, `GenerationTask.modelTokens`) and that its claims use
 * those lengths, and that an agent without the option records nothing.
 *
 * The claim order is read from the requests the agent sends its engine: in batch mode with one
 * prompt per claim, the agent claims the next prompt only once the previous group has finished
 * generating, so the order in which groups first reach the engine is the order they were claimed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { PromptPool, type ClaimOrder } from '../../src/data/index.js';
import { SglangClient, type GenerateHandlers, type GenerateRequest, type GenerateResult } from '../../src/rollout-agent/index.js';
import { natsClient, servicesFixture } from '../data/helpers.js';
import { oneEngineFixture, publishTiny, startTestAgent } from '../helpers/agents.js';

const MODEL = 'claims/tiny';
/** Output tokens of each prompt's trajectories (the agents ignore EOS: every response runs to its budget). */
const SHORT = 3;
const LONG = 12;

const fx = servicesFixture();
const world = oneEngineFixture('laminar-claims-');
beforeAll(() => publishTiny(world.relay.socketPath, MODEL, [0]), 60_000);

/** The real client; notes the group of each request in the order the agent sends them. */
class GroupOrderClient extends SglangClient {
  readonly groups: string[] = [];
  override generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {
    // A trajectory id is <group>/<sample> (src/rollout/ids.ts); a group's samples go out together.
    const group = request.rid.slice(0, request.rid.lastIndexOf('/'));
    if (this.groups.at(-1) !== group) this.groups.push(group);
    return super.generate(request, handlers);
  }
}

/**
 * Loads `short` then `long` (the dataset's order; groups of 2) into a pool of `epochs`, runs one
 * agent claiming one prompt at a time in `claimOrder` until the pool is finished, and returns the
 * pool and the groups in the order the agent claimed them.
 */
async function runJob(job: string, epochs: number, claimOrder?: ClaimOrder): Promise<{ pool: PromptPool; claimed: string[] }> {
  // Opened (and its epochs set) before the agent opens it: the first open records them.
  const pool = await PromptPool.open({ redis: fx.redis, name: job, epochs });
  const payload = (tokens: number): unknown => ({ input_ids: [1, 14, 5, 6, 7, 3], target: [7, 6, 5], max_new_tokens: tokens });
  await pool.load([
    { id: 'short', payload: payload(SHORT), n: 2 },
    { id: 'long', payload: payload(LONG), n: 2 },
  ]);
  const client = new GroupOrderClient(world.engine.url);
  const a = await startTestAgent({
    natsUrl: fx.nats.url,
    connect: natsClient,
    redis: fx.redis,
    job,
    id: `${job}-agent`,
    engineUrl: world.engine.url,
    relaySocket: world.relay.socketPath,
    model: MODEL,
    engine: client,
    batchPrompts: 1,
    ...(claimOrder ? { claimOrder } : {}),
  });
  world.closers.push(() => a.close());
  // Finished: every group of the last epoch completed, i.e. its records stored. The agent asks to
  // record a trajectory's length before writing its record, on the same Redis connection as the
  // completion, so a length that is not there now was never asked for (the script's first use
  // excepted, retried after Redis answers NOSCRIPT: long done by the last epoch's records).
  await expect.poll(async () => (await pool.progress()).finished, { timeout: 60_000, interval: 50 }).toBe(true);
  await a.close();
  return { pool, claimed: client.groups };
}

describe('rollout agent --claim-order', () => {
  it("longest-first: each finished group's output tokens are recorded, and the next epoch claims the long prompt first", async () => {
    const { pool, claimed } = await runJob('longest', 2, 'longest-first');
    // Epoch 0, nothing recorded: the dataset's order. Epoch 1: by what epoch 0 recorded.
    expect(claimed).toEqual(['short#0', 'long#0', 'long#1', 'short#1']);
    // Each prompt's length is its group's longest trajectory in the newest epoch recorded (1).
    expect(Object.fromEntries(await pool.lengths())).toEqual({ short: SHORT, long: LONG });
  }, 120_000);

  it('fifo (the default): nothing is recorded, and every epoch is claimed in the dataset order', async () => {
    const { pool, claimed } = await runJob('fifo', 2);
    expect(claimed).toEqual(['short#0', 'long#0', 'short#1', 'long#1']);
    expect(await pool.lengths()).toEqual(new Map());
  }, 120_000);
});
