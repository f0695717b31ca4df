/**
 * The order test files start in: the longest known ones first, so that on a 2-worker machine the
 * soak (minutes on its own) runs beside the short files instead of after them.
 *
 * Vitest orders by the durations of the last run it cached, and without a cache (a clean clone,
 * which is what CI runs) by file size, largest first; the soak's file is small, so it started near
 * the end and held one worker alone for ~3.5 minutes after the others had finished. The files
 * below were the slowest of the "suite" project in a clean-clone run (seconds in the comments);
 * they start first, longest first, and every other file keeps Vitest's own order behind them.
 * Files of another project keep their place: the projects still run one group after the other.
 *
 * Within a group, the files of a project with `isolate: false` (vitest.config.ts: the files that
 * share a worker process) come after all the others, one after the other: Vitest hands a worker
 * process on to the next file only when that file is the next one queued and of the same project.
 */
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const LONGEST_FILES = [
  // Seconds in the clean-clone CI run of bb9bddd (two files at a time, machine quiet).
  'test/soak/soak.test.ts', // 65 (218 at 90 s of faults; 45 s of faults since)
  'test/rollout-agent/agent.test.ts', // 49
  'test/rollout-agent/demo-tools.test.ts', // 31: unlisted, it started last and ended the suite alone
  'test/cluster-nats/leader-kill.test.ts', // 23 (9-24): a NATS cluster, its stream leader killed under writers and a sampler
  'test/rollout-agent/multi-turn.test.ts', // 23
  'test/simulate/figures.test.ts', // 23 (89 at load 10: a core's work, the simulator's runs)
  'test/rollout/repack-failover.test.ts', // 22
  // The two below were unlisted and started late; seconds in the clean-clone CI run of 87e6933.
  'test/cluster-nats/stale-replica.test.ts', // 25 (16-21 in earlier runs)
  'test/demo-lora.test.ts', // 21: a whole job, training a LoRA adapter for 3 steps
  'test/actions/worker-faults.test.ts', // 21
  'test/actions/result-storage.test.ts', // 21
  'test/relay/parts.test.ts', // 20 (36 on a loaded machine): publisher processes per part
  'test/relay/chunk-probe.test.ts', // 20
  'test/deploy/redis-sentinel.test.ts', // 20: Redis and Sentinel failing over on the testbed (exclusive group)
  'test/data/prompts-cli.test.ts', // 18
  'test/package/package.test.ts', // 17
  'test/data/sampler-service.test.ts', // 17
  'test/cluster-redis/sentinel-failover.test.ts', // 16
  'test/data/restart.test.ts', // 16
  'test/relay/large.test.ts', // 15
  'test/native/ucx-stress.test.ts', // 13
  'test/actions/elastic-supervisor.test.ts', // 13
  'test/deploy/manifest-args.test.ts', // 12 (29 on a loaded machine): the manifests' daemons on a NATS cluster
  'test/control/fleet.test.ts', // 10
  // The real-engine tier (its own group, one file at a time): seconds in the clean-clone run of c1b9c98.
  'test/engines/vllm-agent.test.ts', // 125
  'test/engines/vllm-demo.test.ts', // 115
  'test/engines/vllm.test.ts', // 84
  'test/engines/verl.test.ts', // 34
];

export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const ordered = await super.sort(files);
    const root = this.ctx.config.root;
    const rank = (file: TestSpecification): number => {
      const at = LONGEST_FILES.indexOf(relative(root, file.moduleId));
      const longest = at < 0 ? LONGEST_FILES.length : at;
      return file.project.config.isolate ? longest : LONGEST_FILES.length + 1 + longest;
    };
    // Array.prototype.sort is stable: equal ranks keep the base order, and the group order
    // (the base sort's first key) is compared first again.
    return ordered.sort((a, b) => a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder || rank(a) - rank(b));
  }
}
