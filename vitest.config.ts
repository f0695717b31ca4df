import { defineConfig } from 'vitest/config';
import { LongestFirstSequencer } from './test/helpers/longest-first-sequencer.js';

// Files that build a network-namespace testbed, the whole-job demo, and the Grafana check (a
// whole job scraped), start many daemons each and time repairs in seconds: two of them at once on
// a 2-core machine starve each other's links and timers. They run one at a time, after the suite.
// Mostly waiting on timers and shaped links, they leave about a core idle: `npm test`
// (scripts/test.sh) runs pytest beside them.
const exclusiveFiles = [
  'test/testbed/**/*.test.ts',
  // The manager on the testbed, and two manager files that failed when run two at a time at load
  // 45 (a daemon start bounded at 30 s; an `expect.poll` at its 1-s default). The other files of
  // test/manager (a manager on a real nats-server, no testbed) passed there and run in the suite.
  'test/manager/manager-faults.test.ts',
  'test/manager/daemon-faults.test.ts',
  'test/manager/orphan-completing.test.ts',
  'test/demo.test.ts',
  // The Grafana check scrapes a whole job; the Sentinel failover runs on the netns testbed. The
  // other deploy files (manifest decoding, a relay in a pod's namespaces, the manifests' own
  // arguments) time nothing and run in the suite.
  'test/deploy/grafana-dashboards.test.ts',
  'test/deploy/redis-sentinel.test.ts',
  // A browser beside a whole job.
  'test/dashboard/**/*.test.ts',
];
// Two of the exclusive files time nothing of their own and load the machine no more than pytest
// does: the Sentinel failover (light redis-servers, waits bounded in tens of seconds around the
// manifest's 5-s down-after) and the Grafana check (a short job, then every metric's name). They
// run one at a time, each in whichever lane (the exclusive files' or pytest's, scripts/test.sh)
// ends its own work first: which lane is the longer one changes from run to run.
const besidePytestFiles = ['test/deploy/grafana-dashboards.test.ts', 'test/deploy/redis-sentinel.test.ts'];
// The real-engine tier: real vLLM servers (and verl's manager on Ray), last, with nothing beside
// it, one file at a time. Two at a time took it from 365 s to 218-238 s, but a server's start
// then failed in two of three runs: vLLM hands shared-memory segments between its processes by
// name, unmapped for as long as a worker takes to start (tens of seconds under load), and the
// clean-up of another file's killed server took them for leftovers (src/services/shm-leftovers.ts).
const engineFiles = ['test/engines/**/*.test.ts'];
// The suite's files share their worker processes (`isolate: false`): a worker goes on from one
// file to the next instead of a fresh process importing and evaluating the project's modules
// again for each. Measured: on 40 short files of the suite, 40 CPU seconds isolated against 16
// shared; on the whole suite (199 files) 738 isolated (two workers, load 10) against 560 shared
// (three workers, load 15-20), both under other work.
// The price is a rule every suite file keeps: it stops every daemon, server, UCX worker and
// timer it starts, closes its connections, and restores the environment variables, globals and
// mocks it changes (vi.stubEnv/vi.unstubAllEnvs, try/finally), since what it leaks runs on into
// the files after it in the same process. The exclusive files keep a process each: they claim
// testbeds that are released when their process exits.

const shared = {
  testTimeout: 60_000,
  hookTimeout: 60_000,
  pool: 'forks' as const,
};

export default defineConfig({
  test: {
    reporters: ['default'],
    // The soak and the other long files start first (a clean clone has no durations cached).
    sequence: { sequencer: LongestFirstSequencer },
    projects: [
      {
        test: {
          ...shared,
          name: 'suite',
          include: ['test/**/*.test.ts'],
          exclude: [...exclusiveFiles, ...engineFiles],
          isolate: false,
          // Tests start real daemons and servers and mostly wait on them: two files at a time
          // used 1.6 of the 2 cores (758 CPU-s in 469 s, 2026-11-30); three took the suite from
          // 469 s to 411 s on the quiet machine, with every test green, and used 1.5 cores in
          // the clean-clone run of c1b9c98 (485 CPU-s in 324 s; the niced linters and the engines'
          // environment took the rest). Four keep both cores busy.
          maxWorkers: 4,
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          ...shared,
          name: 'exclusive',
          include: exclusiveFiles,
          exclude: besidePytestFiles,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          ...shared,
          name: 'beside-pytest',
          include: besidePytestFiles,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          ...shared,
          name: 'engines',
          include: engineFiles,
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
