/**
 * The dashboard page (docs/design/dashboard.md, "The views"): connects to the manager's
 * `/events`, keeps the state the deltas make, and renders it at most once a frame: the header,
 * the chain, the rollout grid, the time series, the staleness histograms, the actions panel and
 * the event log, each
 * view redrawing only what changed since it last drew. A hidden tab applies the deltas and renders
 * once shown again.
 *
 * `window.laminarDashboard` exposes the state's number, the render count and the render times
 * (for the browser tests and the bench; nothing reads it otherwise).
 */
import type { DashboardState } from '../model.js';
import { ActionsView } from './actions-view.js';
import { ChainView } from './chain-view.js';
import { DashboardConnection, type StreamState } from './connection.js';
import { EventLog } from './event-log.js';
import { HeaderView } from './header-view.js';
import { RolloutGrid } from './rollout-grid.js';
import { SeriesView } from './series-view.js';
import { StalenessView } from './staleness-view.js';
import { RenderTimings } from './timings.js';

const header = new HeaderView();
const chain = new ChainView();
const grid = new RolloutGrid(() => schedule());
const series = new SeriesView();
const staleness = new StalenessView();
const actions = new ActionsView();
const log = new EventLog();
const timings = new RenderTimings();

let stream: StreamState = 'connecting';
/** The manager's clock minus the page's, measured at the snapshot (for "last update 12 s ago"). */
let offset = 0;
let frame: number | null = null;
let renders = 0;

const connection = new DashboardConnection('events', {
  state: (state, delta, arrivedAt) => {
    if (delta) timings.arrived(arrivedAt);
    else offset = state.at - Date.now();
    schedule();
  },
  stream: (next) => {
    stream = next;
    schedule();
  },
});

function schedule(): void {
  frame ??= requestAnimationFrame(render);
}

function render(): void {
  frame = null;
  const state = connection.state;
  header.renderConnection(stream, state ? Date.now() + offset - state.at : null);
  if (state) {
    header.render(state.header);
    chain.render(state.relays, state.header);
    grid.render(state.rollouts, state.header);
    series.render(state.series);
    staleness.render(state.staleness);
    actions.render(state.actions);
    log.render(state.events, Date.now() + offset);
    renders++;
  }
  document.body.dataset.seq = String(state?.seq ?? 0);
  timings.frameRendered();
}

// The age of the last update and the events' times move on between updates.
setInterval(schedule, 1000);

declare global {
  interface Window {
    laminarDashboard: {
      seq(): number;
      renders(): number;
      renderTimes(): number[];
      renderTimesCount(): number;
      resyncs(): number;
      state(): DashboardState | null;
      stream(): StreamState;
    };
  }
}

window.laminarDashboard = {
  seq: () => connection.state?.seq ?? 0,
  renders: () => renders,
  renderTimes: () => timings.list(),
  renderTimesCount: () => timings.count,
  resyncs: () => connection.resyncs,
  state: () => connection.state,
  stream: () => stream,
};

connection.open();
