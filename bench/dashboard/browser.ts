/**
 * Headless Chromium for the dashboard's bench and browser tests: Debian's `chromium`
 * (scripts/bootstrap.sh installs it) driven by playwright-core, which never downloads a browser.
 * As root Playwright's default (`chromiumSandbox: false`) passes `--no-sandbox`, which Chromium
 * needs there. LAMINAR_CHROMIUM names another executable.
 */
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.LAMINAR_CHROMIUM ?? '/usr/bin/chromium';

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: true });
}

/**
 * The page's own floor for showing anything: `frames` frames that change nothing, each timed as
 * the page times an update (a requestAnimationFrame callback, then a message posted from it,
 * which runs once the frame is done: src/manager/dashboard/page/timings.ts), in ms.
 */
export function bareFrameTimes(page: Page, frames: number): Promise<number[]> {
  return page.evaluate(async (n) => {
    const g = globalThis as unknown as {
      requestAnimationFrame(cb: () => void): number;
      MessageChannel: new () => { port1: { onmessage: (() => void) | null }; port2: { postMessage(m: unknown): void } };
    };
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      times.push(
        await new Promise<number>((resolve) => {
          const start = performance.now();
          g.requestAnimationFrame(() => {
            const channel = new g.MessageChannel();
            channel.port1.onmessage = () => resolve(performance.now() - start);
            channel.port2.postMessage(null);
          });
        }),
      );
    }
    return times;
  }, frames);
}

/** What the dashboard page exposes (src/manager/dashboard/page/main.ts), as the bench reads it. */
interface PageProbe {
  laminarDashboard: { renderTimes(): number[]; renderTimesCount(): number; resyncs(): number };
  document: { getElementById(id: string): { dataset: Record<string, string | undefined> } | null };
}

/** Waits until the page's rollout grid shows `count` rollouts. */
export async function untilRolloutsShown(page: Page, count: number, timeoutMs: number): Promise<void> {
  await page.waitForFunction((n) => (globalThis as unknown as PageProbe).document.getElementById('rollout-grid')?.dataset.shown === String(n), count, {
    timeout: timeoutMs,
  });
}

/** The page's render timings: how many updates it has timed so far, and the newest times kept (ms). */
export function renderTimings(page: Page): Promise<{ count: number; times: number[] }> {
  return page.evaluate(() => {
    const probe = (globalThis as unknown as PageProbe).laminarDashboard;
    return { count: probe.renderTimesCount(), times: probe.renderTimes() };
  });
}

/** The render times of the updates timed since `before` (those still kept). */
export async function renderTimesSince(page: Page, before: { count: number }): Promise<number[]> {
  const now = await renderTimings(page);
  return now.times.slice(Math.max(0, now.times.length - (now.count - before.count)));
}

/** Snapshots the page took after its first one (a delta that did not follow, or a reconnect). */
export function pageResyncs(page: Page): Promise<number> {
  return page.evaluate(() => (globalThis as unknown as PageProbe).laminarDashboard.resyncs());
}
