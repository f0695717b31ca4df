import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Tests start real daemons and servers and use most of the machine's memory bandwidth:
    // two files at a time fit a 2-core CI machine.
    fileParallelism: true,
    maxWorkers: 2,
    pool: 'forks',
    reporters: ['default'],
  },
});
