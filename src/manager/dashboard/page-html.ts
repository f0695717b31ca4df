/**
 * The dashboard page's HTML (`GET /`): the skeleton the page's modules fill in
 * (src/manager/dashboard/page/), loading uPlot as a classic script first, then the page's entry
 * module. Every URL is relative (`assets/<prefix>/...`, `events`), so the page also works behind
 * a reverse proxy that serves it under a path. No inline script or style: the page's
 * Content-Security-Policy (routes.ts) allows only the manager's own files.
 */

/** The HTML of the page whose assets are under `assets/<prefix>/`. */
export function renderPage(prefix: string): string {
  const asset = (name: string): string => `assets/${prefix}/${name}`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>laminar</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${asset('uPlot.min.css')}">
<link rel="stylesheet" href="${asset('dashboard.css')}">
<script src="${asset('uPlot.iife.min.js')}"></script>
<script type="module" src="${asset('manager/dashboard/page/main.js')}"></script>
</head>
<body>
<header class="top">
  <h1>laminar</h1>
  <span id="connection" class="connection" data-state="connecting">connecting</span>
  <dl id="facts" class="facts"></dl>
</header>
<main>
  <section id="chain-section">
    <h2>Chain <small id="chain-summary"></small></h2>
    <div id="chain" class="chain"></div>
  </section>
  <section id="rollout-section">
    <h2>Rollouts <small id="rollout-summary"></small></h2>
    <div class="controls">
      <label>colour <select id="rollout-colour"></select></label>
      <label>sort <select id="rollout-sort"></select></label>
      <span id="rollout-health" class="health-filter">
        <label><input type="checkbox" value="alive" checked> alive</label>
        <label><input type="checkbox" value="suspected" checked> suspected</label>
        <label><input type="checkbox" value="dead" checked> dead</label>
      </span>
    </div>
    <div id="rollout-versions" class="versions"></div>
    <div class="grid-box">
      <canvas id="rollout-grid" width="1" height="1"></canvas>
      <div id="rollout-tip" class="tip" hidden></div>
    </div>
    <p class="legend">colour: weight version's age <span class="age age0">newest</span><span class="age age1">1 behind</span><span class="age age2">2</span><span class="age age3">3</span><span class="age age4">4+</span><span class="age none">none</span>; fill from the bottom: KV use; red border: suspected; dark with a cross: dead; red corner: refused a version; blue dot: carrying out a command</p>
  </section>
  <section id="series-section">
    <h2>Time series <small>last 15 minutes</small></h2>
    <div id="charts" class="charts">
      <div id="staleness" class="hists">
        <h3 id="staleness-heading">Staleness, last minute: trajectories by versions behind</h3>
        <div class="hist-pair">
          <div id="hist-inherent" class="hist"></div>
          <div id="hist-consumption" class="hist"></div>
        </div>
      </div>
    </div>
  </section>
  <section id="actions-section">
    <h2>Actions <small id="actions-summary"></small></h2>
    <table id="action-kinds" class="kinds"></table>
    <div id="hist-turns" class="hist turns"></div>
  </section>
  <section id="event-section">
    <h2>Events</h2>
    <div id="event-kinds" class="chips"></div>
    <ol id="events" class="events"></ol>
  </section>
</main>
</body>
</html>
`;
}
