/**
 * The manager's `GET /status` on its HTTP port: the status as `laminar status --json` prints
 * it, narrowed by the same filters given as query parameters, so that a script or a page at a
 * large fleet asks for what it shows rather than the whole 350 KiB:
 *
 *   /status?kind=relay,rollout   /status?health=dead,suspected   /status?behind=1   /status?summary=1
 *
 * A bad value is a 400 with ERR_INVALID_ARG (the router answers it); a parameter not listed here,
 * or one given twice, a 400 with ERR_HTTP_BAD_QUERY.
 */
import { ErrorCodes } from '../common/error-codes.js';
import { LaminarError } from '../common/errors.js';
import { sendBody } from '../common/http-answers.js';
import type { HttpRoute } from '../common/http-server.js';
import type { ManagerStatus } from './manager-status.js';
import { filterStatus, parseStatusFilter, summarizeStatus } from './status-view.js';

export const STATUS_QUERY = ['kind', 'health', 'behind', 'summary'] as const;

/** A flag of the query: `1`, `true` or nothing (`?summary`) sets it; `0` or `false` leaves it off. */
export function parseQueryFlag(name: string, value: string | undefined): boolean {
  if (value === undefined) return false;
  if (value === '' || value === '1' || value === 'true') return true;
  if (value === '0' || value === 'false') return false;
  throw new LaminarError(ErrorCodes.INVALID_ARG, `${name}: ${JSON.stringify(value.slice(0, 40))} is not 1, true, 0 or false`);
}

export function managerStatusRoute(status: () => ManagerStatus): HttpRoute {
  return {
    path: '/status',
    query: STATUS_QUERY,
    handle: ({ res, query }) => {
      // Checked before the status is built: a bad request costs nothing.
      const kind = query.get('kind');
      const health = query.get('health');
      const filter = parseStatusFilter(
        { ...(kind === undefined ? {} : { kind }), ...(health === undefined ? {} : { health }), behind: parseQueryFlag('behind', query.get('behind')) },
        '',
      );
      const summary = parseQueryFlag('summary', query.get('summary'));
      const shown = Object.keys(filter).length === 0 ? status() : filterStatus(status(), filter);
      sendBody(res, 200, { 'content-type': 'application/json' }, JSON.stringify(summary ? summarizeStatus(shown) : shown));
    },
  };
}
