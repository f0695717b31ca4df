/**
 * The dashboard's routes on the manager's HTTP server (src/common/http-server.ts): `GET /events`,
 * the server-sent events of the publisher (publisher.ts). A route for browsers: its `Host` must be
 * an address, `localhost` or the served name (against DNS rebinding). The page and its assets
 * join here once they are built.
 */
import type { HttpRoute } from '../../common/http-server.js';
import type { DashboardPublisher } from './publisher.js';

export function dashboardEventsRoute(publisher: DashboardPublisher): HttpRoute {
  return {
    path: '/events',
    forBrowsers: true,
    handle: (exchange) => publisher.serve(exchange),
  };
}

/** Every route of the dashboard. */
export function dashboardRoutes(publisher: DashboardPublisher): HttpRoute[] {
  return [dashboardEventsRoute(publisher)];
}
