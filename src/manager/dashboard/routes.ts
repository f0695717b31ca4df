/**
 * The dashboard's routes on the manager's HTTP server (src/common/http-server.ts): the page at
 * `/`, its assets under `/assets/<prefix>/` (assets.ts), `/favicon.ico` (204: the page names an
 * inline icon, but browsers ask anyway) and `GET /events`, the server-sent events of the
 * publisher (publisher.ts). All are routes for browsers: their `Host` must be an address,
 * `localhost` or the served name (against DNS rebinding). An asset path not in the table is the
 * router's 404.
 *
 * When the assets cannot be read (the page was not built), `/` answers 503 saying so and the
 * rest of the manager (its `/events` included) serves as usual.
 */
import { ErrorCodes } from '../../common/error-codes.js';
import { sendError, sendFixed, type FixedBody } from '../../common/http-answers.js';
import type { HttpRoute } from '../../common/http-server.js';
import type { DashboardAssets } from './assets.js';
import type { DashboardPublisher } from './publisher.js';

/** The page's policy: only the manager's own scripts, styles and streams; `data:` images (the icon); never framed. */
export const PAGE_SECURITY_HEADERS = {
  'content-security-policy': "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
};

export function dashboardEventsRoute(publisher: DashboardPublisher): HttpRoute {
  return {
    path: '/events',
    forBrowsers: true,
    handle: (exchange) => publisher.serve(exchange),
  };
}

/** `/`, the assets and the icon; `assets` an Error when they could not be read. */
export function dashboardPageRoutes(assets: DashboardAssets | Error): HttpRoute[] {
  if (assets instanceof Error) {
    const message = assets.message;
    return [
      {
        path: '/',
        forBrowsers: true,
        handle: ({ res }) => sendError(res, 503, ErrorCodes.INTERNAL, message),
      },
    ];
  }
  const fixed = (path: string, body: FixedBody, label: string, headers: Record<string, string> = {}): HttpRoute => ({
    path,
    label,
    forBrowsers: true,
    handle: ({ req, res }) => {
      for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
      sendFixed(req, res, body);
    },
  });
  return [
    fixed('/', assets.page, '/', PAGE_SECURITY_HEADERS),
    ...[...assets.files].map(([path, body]) => fixed(path, body, '/assets')),
    {
      path: '/favicon.ico',
      forBrowsers: true,
      handle: ({ res }) => {
        res.writeHead(204, { 'cache-control': 'public, max-age=86400' });
        res.end();
      },
    },
  ];
}

/** Every route of the dashboard: the page and its assets (when given) and the events. */
export function dashboardRoutes(publisher: DashboardPublisher, assets?: DashboardAssets | Error): HttpRoute[] {
  return [...(assets === undefined ? [] : dashboardPageRoutes(assets)), dashboardEventsRoute(publisher)];
}
