/**
 * The dashboard's static assets (docs/design/dashboard.md, "Static assets"): read into memory at
 * start, hashed and gzipped once. The page's modules come from the page's own build (the tree
 * under `browser/` beside this file, which `npm run build:ts` makes with
 * src/manager/dashboard/page/tsconfig.json), uPlot from its package, the style sheet from
 * page-css.ts. Nothing of a request's path ever reaches the file system: a request is looked up
 * in this table by its exact path.
 *
 * Every asset is served under `/assets/<prefix>/`, where the prefix is the start of a hash of
 * all of them: an upgrade changes every URL, so assets are cached for a year (`immutable`) and
 * the page itself (`/`) is revalidated with its ETag.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ErrorCodes } from '../../common/error-codes.js';
import { LaminarError } from '../../common/errors.js';
import { fixedBody, type FixedBody } from '../../common/http-answers.js';
import { PAGE_CSS } from './page-css.js';
import { renderPage } from './page-html.js';

export const JS_TYPE = 'text/javascript; charset=utf-8';
export const CSS_TYPE = 'text/css; charset=utf-8';
export const HTML_TYPE = 'text/html; charset=utf-8';
export const ASSET_CACHE = 'public, max-age=31536000, immutable';

/**
 * Where the page's build puts its modules: dist/src/manager/dashboard/browser/. Found from the
 * dist/ folder this module runs from, since it runs both as tsc's file beside that folder and as
 * part of a chunk of the bundled CLI in dist/src/cli/ (scripts/bundle-cli.mjs); from src/ (the
 * tests), beside this file.
 */
export const BROWSER_DIR = browserDirOf(import.meta.url);

function browserDirOf(moduleUrl: string): string {
  const dist = moduleUrl.lastIndexOf('/dist/src/');
  if (dist < 0) return fileURLToPath(new URL('./browser/', moduleUrl));
  return fileURLToPath(new URL('src/manager/dashboard/browser/', moduleUrl.slice(0, dist + '/dist/'.length)));
}

export interface DashboardAssets {
  /** The URL prefix: the first 8 hex digits of a hash of every asset. */
  readonly prefix: string;
  /** `GET /`. */
  readonly page: FixedBody;
  /** By the path they are served at (`/assets/<prefix>/manager/dashboard/page/main.js`). */
  readonly files: ReadonlyMap<string, FixedBody>;
}

/**
 * Reads every asset. Throws ERR_INTERNAL naming what is missing when the page's build or uPlot is
 * not there (a broken install, or a checkout built without the page's project).
 */
export function loadDashboardAssets(browserDir = BROWSER_DIR): DashboardAssets {
  const entry = join(browserDir, 'manager', 'dashboard', 'page', 'main.js');
  if (!existsSync(entry)) {
    throw new LaminarError(ErrorCodes.INTERNAL, `the dashboard page is not built (${entry} is missing): run npm run build:ts`);
  }
  const sources = new Map<string, { body: Buffer; type: string }>();
  for (const file of javascriptFiles(browserDir)) {
    sources.set(relative(browserDir, file).split(sep).join('/'), { body: readFileSync(file), type: JS_TYPE });
  }
  const require = createRequire(import.meta.url);
  let uplotScript: string;
  let uplotCss: string;
  try {
    uplotScript = require.resolve('uplot/dist/uPlot.iife.min.js');
    uplotCss = require.resolve('uplot/dist/uPlot.min.css');
  } catch (cause) {
    throw new LaminarError(ErrorCodes.INTERNAL, 'the uplot package is not installed (a dependency of laminar): run npm ci', { cause });
  }
  sources.set('uPlot.iife.min.js', { body: readFileSync(uplotScript), type: JS_TYPE });
  sources.set('uPlot.min.css', { body: readFileSync(uplotCss), type: CSS_TYPE });
  sources.set('dashboard.css', { body: Buffer.from(PAGE_CSS, 'utf8'), type: CSS_TYPE });

  const hash = createHash('sha256');
  for (const [name, { body }] of [...sources].sort((a, b) => (a[0] < b[0] ? -1 : 1))) hash.update(name).update('\0').update(body);
  const prefix = hash.digest('hex').slice(0, 8);
  const files = new Map<string, FixedBody>();
  for (const [name, { body, type }] of sources) files.set(`/assets/${prefix}/${name}`, fixedBody(body, type, ASSET_CACHE));
  return { prefix, page: fixedBody(renderPage(prefix), HTML_TYPE, 'no-cache'), files };
}

function javascriptFiles(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...javascriptFiles(path));
    else if (entry.isFile() && entry.name.endsWith('.js')) found.push(path);
  }
  return found.sort();
}
