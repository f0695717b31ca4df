/**
 * The dashboard page and its assets as the manager serves them (src/manager/dashboard/assets.ts,
 * routes.ts), on the HTTP router on a real socket, from the page's real build in dist/: the page
 * with its security headers and ETag, every asset it names served with its content type and a
 * year's caching, the module graph closed (every import of a served module is served), no path
 * outside the table (404 as JSON), a foreign Host refused, and the page answering 503 when its
 * build is missing while the router goes on.
 */
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Registry } from 'prom-client';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { startHttpServer, type HttpServer } from '../../src/common/http-server.js';
import { ASSET_CACHE, loadDashboardAssets, type DashboardAssets } from '../../src/manager/dashboard/assets.js';
import { dashboardPageRoutes } from '../../src/manager/dashboard/routes.js';
import { get, json } from '../helpers/http.js';
import { REPO } from '../helpers/relay.js';

/** The page's build, as `npm run build:ts` makes it (the test runs the sources, the assets are in dist/). */
const BROWSER_DIR = join(REPO, 'dist', 'src', 'manager', 'dashboard', 'browser');

describe('the dashboard page and its assets', () => {
  let assets: DashboardAssets;
  let server: HttpServer | null = null;

  beforeAll(() => {
    assets = loadDashboardAssets(BROWSER_DIR);
  });
  afterEach(async () => {
    await server?.close();
    server = null;
  });
  const serve = async (table: DashboardAssets | Error): Promise<number> => {
    server = await startHttpServer({ host: '127.0.0.1', port: 0, routes: dashboardPageRoutes(table), registry: new Registry() });
    return server.port;
  };

  it('serves the page with its security headers and ETag, 304 when the browser has it, gzipped when asked', async () => {
    const port = await serve(assets);
    const page = await get(port, '/');
    expect(page.status).toBe(200);
    expect(page.headers).toMatchObject({
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-cache',
      'content-security-policy': "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
      'referrer-policy': 'no-referrer',
      'x-content-type-options': 'nosniff',
    });
    expect(page.body.toString()).toContain(`assets/${assets.prefix}/manager/dashboard/page/main.js`);
    const etag = page.headers.etag!;
    const again = await get(port, '/', { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    const zipped = await get(port, '/', { headers: { 'accept-encoding': 'gzip' } });
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(zipped.body).toString()).toBe(page.body.toString());
    const head = await get(port, '/', { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    expect(Number(head.headers['content-length'])).toBe(page.body.length);
    expect((await get(port, '/favicon.ico')).status).toBe(204);
  });

  it('serves every asset the page names with its content type and a year of caching', async () => {
    const port = await serve(assets);
    const html = (await get(port, '/')).body.toString();
    const named = [...html.matchAll(/(?:href|src)="(assets\/[^"]+)"/g)].map((m) => `/${m[1]!}`);
    expect(named.sort()).toEqual(
      ['dashboard.css', 'uPlot.min.css', 'uPlot.iife.min.js', 'manager/dashboard/page/main.js'].map((n) => `/assets/${assets.prefix}/${n}`).sort(),
    );
    for (const path of named) {
      const answer = await get(port, path);
      expect(answer.status, path).toBe(200);
      expect(answer.headers['content-type'], path).toBe(path.endsWith('.css') ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8');
      expect(answer.headers['cache-control'], path).toBe(ASSET_CACHE);
      expect(answer.body.length, path).toBeGreaterThan(100);
    }
  });

  it('serves the whole module graph of the page: every import of a served module is served', async () => {
    const port = await serve(assets);
    const modules = [...assets.files.keys()].filter((p) => p.endsWith('.js') && !p.endsWith('uPlot.iife.min.js'));
    // The page, its views, the model and the error catalogue it imports; the staleness view's percentiles (series.js, stats.js).
    for (const name of [
      'manager/dashboard/page/main.js',
      'manager/dashboard/page/staleness-view.js',
      'manager/dashboard/model.js',
      'manager/dashboard/series.js',
      'common/stats.js',
      'common/errors.js',
      'common/error-codes.js',
    ])
      expect(modules).toContain(`/assets/${assets.prefix}/${name}`);
    for (const path of modules) {
      const text = (await get(port, path)).body.toString();
      for (const [, spec] of text.matchAll(/(?:from|import)\s*'([^']+)'/g)) {
        expect(spec, `${path} imports ${spec}`).toMatch(/^\.\.?\//);
        const target = new URL(spec!, `http://x${path}`).pathname;
        expect(assets.files.has(target), `${path} imports ${target}, which is not served`).toBe(true);
      }
    }
  });

  it('answers 404 for any path outside the table, 400 for a query and 421 for a foreign Host, and goes on serving', async () => {
    const port = await serve(assets);
    for (const path of [
      `/assets/${assets.prefix}/nope.js`,
      '/assets/00000000/manager/dashboard/page/main.js',
      `/assets/${assets.prefix}/../../package.json`,
      `/assets/${assets.prefix}/manager/dashboard/page/main.ts`,
      `/assets/${assets.prefix}/`,
      '/assets/',
      '/index.html',
    ]) {
      const answer = await get(port, path);
      expect(answer.status, path).toBe(404);
      expect(json(answer).code, path).toBe(ErrorCodes.HTTP_NOT_FOUND);
    }
    const query = await get(port, `/?${'x'.repeat(100)}=1`);
    expect(query.status).toBe(400);
    expect(json(query).code).toBe(ErrorCodes.HTTP_BAD_QUERY);
    const foreign = await get(port, `/assets/${assets.prefix}/dashboard.css`, { headers: { host: 'evil.example:9480' } });
    expect(foreign.status).toBe(421);
    expect(json(foreign).code).toBe(ErrorCodes.HTTP_HOST);
    expect((await get(port, '/', { headers: { host: 'localhost:9480' } })).status).toBe(200);
  });

  it('answers 503 at / naming the missing build when the page was not built', async () => {
    let missing: unknown;
    try {
      loadDashboardAssets(join(REPO, 'no-such-build'));
    } catch (err) {
      missing = err;
    }
    expect(missing).toMatchObject({ code: ErrorCodes.INTERNAL, message: expect.stringMatching(/dashboard page is not built .*npm run build:ts/) as unknown });
    const port = await serve(missing as Error);
    const page = await get(port, '/');
    expect(page.status).toBe(503);
    expect(json(page).message).toMatch(/not built/);
    expect((await get(port, '/nope')).status).toBe(404);
  });

  it('names the assets by a hash of their contents', () => {
    expect(assets.prefix).toMatch(/^[0-9a-f]{8}$/);
    expect(loadDashboardAssets(BROWSER_DIR).prefix).toBe(assets.prefix);
    for (const path of assets.files.keys()) expect(path.startsWith(`/assets/${assets.prefix}/`)).toBe(true);
  });
});
