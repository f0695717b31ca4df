/** A one-line progress bar on a terminal (stderr); silent when stderr is not a TTY. */
import { formatBytes } from '../common/units.js';

export function progressBar(label: string): { update(done: number, total: number): void; end(): void } {
  const tty = process.stderr.isTTY;
  const started = performance.now();
  let lastDraw = 0;
  return {
    update(done, total) {
      if (!tty) return;
      const now = performance.now();
      if (done < total && now - lastDraw < 100) return;
      lastDraw = now;
      const width = 30;
      const frac = total > 0 ? done / total : 1;
      const filled = Math.round(frac * width);
      const rate = done / Math.max((now - started) / 1e3, 1e-3);
      process.stderr.write(
        `\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ` +
          `${formatBytes(done)}/${formatBytes(total)} ${formatBytes(rate)}/s   `,
      );
    },
    end() {
      if (tty) process.stderr.write('\n');
    },
  };
}
