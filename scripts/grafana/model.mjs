/**
 * Builders of Grafana's dashboard JSON model (schema 39, Grafana 10 and 11) for the dashboards in
 * docs/deploy/grafana/: the dashboard with its `${DS_PROMETHEUS}` data source input and `instance`
 * variable, rows, and panels laid out on Grafana's 24-column grid. Plain data in, plain JSON out:
 * scripts/grafana-dashboards.mjs holds what each dashboard shows.
 */

/** The data source every panel and variable uses: replaced by the one chosen at import. */
export const DATASOURCE = Object.freeze({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });

/** The label matcher of the `instance` variable, for panels' selectors. */
export const I = 'instance=~"$instance"';

const WIDTH = 24;

/**
 * A panel. `targets`: [expr, legendFormat] pairs. Options: `type` (timeseries, stat, heatmap,
 * state-timeline, bargauge), `unit` (a Grafana unit id), `w`/`h` (grid cells; default 8 x 8),
 * `min`/`max`, `stack` (stacked areas), `description`, `format` ('heatmap' for `le` buckets),
 * `decimals`, `mappings`.
 */
export function panel(title, targets, options = {}) {
  return { kind: 'panel', title, targets, ...options };
}

/** A row: a full-width, collapsible header over the panels that follow it. */
export function row(title, panels) {
  return { kind: 'row', title, panels };
}

/** The process row every dashboard ends with: CPU, memory, event-loop lag and hold-ups of the selected daemons. */
export function processRow() {
  return row('Processes', [
    panel('CPU', [[`rate(laminar_process_cpu_seconds_total{${I}}[1m])`, '{{instance}}']], {
      unit: 'percentunit',
      w: 6,
      description: 'CPU time per second of each daemon (1 = one core busy).',
    }),
    panel('Resident memory', [[`laminar_process_resident_memory_bytes{${I}}`, '{{instance}}']], { unit: 'bytes', w: 6 }),
    panel('Event-loop lag p99', [[`laminar_nodejs_eventloop_lag_p99_seconds{${I}}`, '{{instance}}']], {
      unit: 's',
      w: 6,
      description: 'p99 lag of the event loop since the previous scrape, sampled once a second (docs/reference/metrics.md).',
    }),
    panel('Event-loop hold-ups', [[`increase(laminar_event_loop_holdups_total{${I}}[5m])`, '{{instance}}']], {
      unit: 'short',
      w: 6,
      description: 'Times in 5 min the event loop ran timers more than 0.5 s late: the daemon answered nobody meanwhile.',
    }),
  ]);
}

function fieldConfig(p) {
  const defaults = { unit: p.unit ?? 'short' };
  if (p.min !== undefined) defaults.min = p.min;
  if (p.max !== undefined) defaults.max = p.max;
  if (p.decimals !== undefined) defaults.decimals = p.decimals;
  if (p.mappings) defaults.mappings = p.mappings;
  const type = p.type ?? 'timeseries';
  if (type === 'timeseries') {
    defaults.custom = {
      drawStyle: 'line',
      lineWidth: 1,
      fillOpacity: p.stack ? 40 : 10,
      showPoints: 'never',
      spanNulls: false,
      stacking: { mode: p.stack ? 'normal' : 'none', group: 'A' },
    };
    defaults.color = { mode: 'palette-classic' };
  } else if (type === 'state-timeline') {
    defaults.color = { mode: 'continuous-RdYlGr' };
    defaults.custom = { fillOpacity: 80, lineWidth: 0 };
  } else if (type === 'stat' || type === 'bargauge') {
    defaults.color = { mode: 'thresholds' };
    defaults.thresholds = { mode: 'absolute', steps: [{ color: 'green', value: null }] };
  }
  return { defaults, overrides: [] };
}

function panelOptions(p) {
  const type = p.type ?? 'timeseries';
  const reduce = { calcs: ['lastNotNull'], fields: '', values: false };
  switch (type) {
    case 'stat':
      return { reduceOptions: reduce, colorMode: 'value', graphMode: 'area', justifyMode: 'auto', orientation: 'auto', textMode: 'auto' };
    case 'bargauge':
      return { reduceOptions: reduce, displayMode: 'basic', orientation: 'horizontal', showUnfilled: true };
    case 'state-timeline':
      return {
        showValue: 'never',
        mergeValues: false,
        rowHeight: 0.9,
        alignValue: 'left',
        legend: { showLegend: false, displayMode: 'list', placement: 'bottom' },
      };
    case 'heatmap':
      return {
        calculate: p.format !== 'heatmap',
        cellGap: 1,
        color: { mode: 'scheme', scheme: 'Oranges', steps: 64, exponent: 0.5, fill: 'dark-orange', reverse: false },
        yAxis: { axisPlacement: 'left', unit: p.unit ?? 'short' },
        rowsFrame: { layout: 'auto' },
        tooltip: { mode: 'single', yHistogram: false },
        legend: { show: true },
      };
    default:
      return { legend: { displayMode: 'list', placement: 'bottom', showLegend: true }, tooltip: { mode: 'multi', sort: 'desc' } };
  }
}

function buildPanel(p, id, gridPos) {
  const json = { id, type: p.type ?? 'timeseries', title: p.title };
  if (p.description) json.description = p.description;
  json.datasource = DATASOURCE;
  json.gridPos = gridPos;
  json.fieldConfig = fieldConfig(p);
  json.options = panelOptions(p);
  json.targets = p.targets.map(([expr, legendFormat], i) => {
    const target = { datasource: DATASOURCE, refId: String.fromCharCode(65 + i), expr, legendFormat, range: true, instant: false };
    if (p.format) target.format = p.format;
    return target;
  });
  return json;
}

/**
 * A whole dashboard: `rows` (from row()) laid out top to bottom, each row's panels left to right,
 * wrapping at 24 columns; panel ids numbered from 1 in that order. `instanceFrom`: a metric every
 * daemon this dashboard is about exports with a sample from its start (the variable lists the
 * `instance` labels of its series).
 */
export function dashboard({ uid, title, description, tags, instanceFrom, rows }) {
  let id = 0;
  let y = 0;
  const panels = [];
  for (const r of rows) {
    panels.push({ id: ++id, type: 'row', title: r.title, collapsed: false, gridPos: { h: 1, w: WIDTH, x: 0, y }, panels: [] });
    y += 1;
    let x = 0;
    let rowHeight = 0;
    for (const p of r.panels) {
      const w = p.w ?? 8;
      const h = p.h ?? 8;
      if (x + w > WIDTH) {
        y += rowHeight;
        x = 0;
        rowHeight = 0;
      }
      panels.push(buildPanel(p, ++id, { h, w, x, y }));
      x += w;
      rowHeight = Math.max(rowHeight, h);
    }
    y += rowHeight;
  }
  const variableQuery = `label_values(${instanceFrom}, instance)`;
  return {
    __inputs: [
      {
        name: 'DS_PROMETHEUS',
        label: 'Prometheus',
        description: 'the Prometheus that scrapes the laminar daemons',
        type: 'datasource',
        pluginId: 'prometheus',
        pluginName: 'Prometheus',
      },
    ],
    __elements: {},
    __requires: [
      { type: 'grafana', id: 'grafana', name: 'Grafana', version: '10.0.0' },
      { type: 'datasource', id: 'prometheus', name: 'Prometheus', version: '1.0.0' },
      ...[...new Set(panels.map((p) => p.type).filter((t) => t !== 'row'))].sort().map((t) => ({ type: 'panel', id: t, name: PANEL_NAMES[t], version: '' })),
    ],
    annotations: {
      list: [
        {
          builtIn: 1,
          datasource: { type: 'grafana', uid: '-- Grafana --' },
          enable: true,
          hide: true,
          iconColor: 'rgba(0, 211, 255, 1)',
          name: 'Annotations & Alerts',
          type: 'dashboard',
        },
      ],
    },
    description,
    editable: true,
    fiscalYearStartMonth: 0,
    graphTooltip: 1,
    id: null,
    links: [
      {
        asDropdown: true,
        icon: 'external link',
        includeVars: false,
        keepTime: true,
        tags: ['laminar'],
        targetBlank: false,
        title: 'laminar',
        type: 'dashboards',
      },
    ],
    panels,
    refresh: '10s',
    schemaVersion: 39,
    tags,
    templating: {
      list: [
        {
          name: 'instance',
          label: 'instance',
          type: 'query',
          datasource: DATASOURCE,
          definition: variableQuery,
          query: { qryType: 1, query: variableQuery, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
          refresh: 2,
          regex: '',
          sort: 1,
          multi: true,
          includeAll: true,
          allValue: '.*',
          current: {},
          options: [],
          hide: 0,
          skipUrlSync: false,
        },
      ],
    },
    time: { from: 'now-1h', to: 'now' },
    timepicker: {},
    timezone: '',
    title,
    uid,
    version: 1,
    weekStart: '',
  };
}

const PANEL_NAMES = { timeseries: 'Time series', stat: 'Stat', heatmap: 'Heatmap', 'state-timeline': 'State timeline', bargauge: 'Bar gauge' };
