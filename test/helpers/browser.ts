/**
 * The dashboard's browser tests: headless Chromium as the bench launches it
 * (bench/dashboard/browser.ts), a page that collects its errors, and the shapes the tests read.
 *
 * The functions a test runs in the page (`page.waitForFunction`, `page.evaluate`) are typed with
 * the few DOM shapes below, declared in the test module (`declare const document: PageDocument`):
 * the DOM library itself would change the types of Node code the test project also checks.
 */
import type { Browser, ConsoleMessage, Page } from 'playwright-core';

export { launchChromium } from '../../bench/dashboard/browser.js';

/** A page of `browser` that collects its console errors and uncaught exceptions (a CSP refusal is one). */
export async function pageWithErrors(browser: Browser, viewport = { width: 1400, height: 1000 }): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage({ viewport });
  const errors: string[] = [];
  page.on('console', (m: ConsoleMessage) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  page.on('pageerror', (err) => errors.push(err.message));
  return { page, errors };
}

/** What the dashboard page exposes for tests and the bench (src/manager/dashboard/page/main.ts). */
export interface DashboardProbe {
  seq(): number;
  renders(): number;
  renderTimes(): number[];
  renderTimesCount(): number;
  resyncs(): number;
  state(): import('../../src/manager/dashboard/model.js').DashboardState | null;
  stream(): 'connecting' | 'live' | 'reconnecting';
}

/** The parts of an element the tests read. */
export interface PageElement {
  dataset: Record<string, string | undefined>;
  className: string;
  classList: { contains(name: string): boolean };
  textContent: string | null;
}

/** The parts of `document` the tests read. */
export interface PageDocument {
  querySelector(selector: string): PageElement | null;
  querySelectorAll(selector: string): ArrayLike<PageElement>;
  getElementById(id: string): PageElement | null;
}

export interface PageWindow {
  laminarDashboard: DashboardProbe;
}
