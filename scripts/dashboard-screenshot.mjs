#!/usr/bin/env node
/**
 * A picture of a running job's dashboard (the README's): headless Chromium (Debian's `chromium`,
 * driven by playwright-core) loads the manager's page, waits until it is live and has drawn its
 * charts, lets the series fill for `--wait`, and writes a PNG.
 *
 *   node scripts/dashboard-screenshot.mjs http://127.0.0.1:<manager http port>/ docs/images/dashboard.png [--wait 60s]
 *
 * With `npm run demo` running, the demo prints the address on its "dashboard" line.
 */
import { chromium } from 'playwright-core';

const [url, out, ...rest] = process.argv.slice(2);
if (!url || !out) {
  process.stderr.write('usage: node scripts/dashboard-screenshot.mjs <dashboard url> <out.png> [--wait 60s] [--width 1600] [--height 1300]\n');
  process.exit(2);
}
const flag = (name, fallback) => {
  const i = rest.indexOf(name);
  return i >= 0 && rest[i + 1] !== undefined ? rest[i + 1] : fallback;
};
const waitMs = Number.parseFloat(flag('--wait', '60s')) * (flag('--wait', '60s').endsWith('ms') ? 1 : 1000);
const viewport = { width: Number(flag('--width', '1600')), height: Number(flag('--height', '1300')) };

const browser = await chromium.launch({ executablePath: process.env.LAMINAR_CHROMIUM ?? '/usr/bin/chromium', headless: true });
try {
  const page = await browser.newPage({ viewport });
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById('connection')?.dataset.state === 'live', null, { timeout: 60_000 });
  await page.waitForSelector('#charts .chart canvas', { timeout: 60_000 });
  await new Promise((resolve) => setTimeout(resolve, waitMs));
  await page.screenshot({ path: out });
  process.stderr.write(`dashboard screenshot written to ${out}\n`);
} finally {
  await browser.close();
}
