/**
 * Progress of a long `laminar prompts load` on stderr: a bar redrawn in place on a terminal; in
 * a log (stderr not a terminal) a line when a tenth of the file is passed (one line for the
 * last tenth passed when a batch passes two), so that a job's log shows a load moving without a
 * line per batch. Files smaller than QUIET_BELOW bytes load in well under a
 * second and show none.
 */
export const QUIET_BELOW = 1024 * 1024;

export interface LoadProgress {
  /** `done` of `total` units (bytes of a JSONL file, rows of a Parquet file). */
  update(done: number, total: number): void;
  end(): void;
}

export function loadProgress(label: string, unit: 'bytes' | 'rows', fileBytes: number, quiet: boolean): LoadProgress {
  if (quiet || fileBytes < QUIET_BELOW) return { update: () => undefined, end: () => undefined };
  const tty = process.stderr.isTTY;
  const started = performance.now();
  let lastTenth = 0;
  let lastDraw = 0;
  const shown = (n: number): string => (unit === 'bytes' ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${n} rows`);
  return {
    update(done, total) {
      const frac = total > 0 ? Math.min(done / total, 1) : 1;
      const seconds = (performance.now() - started) / 1e3;
      if (tty) {
        if (frac < 1 && performance.now() - lastDraw < 100) return;
        lastDraw = performance.now();
        const filled = Math.round(frac * 30);
        process.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(30 - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ${shown(done)}   `);
        return;
      }
      const tenth = Math.floor(frac * 10);
      if (tenth <= lastTenth) return;
      lastTenth = tenth;
      process.stderr.write(`${label}: ${tenth * 10}% (${shown(done)} of ${shown(total)}, ${seconds.toFixed(1)} s)\n`);
    },
    end() {
      if (tty) process.stderr.write('\n');
    },
  };
}
