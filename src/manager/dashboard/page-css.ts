/**
 * The dashboard page's style sheet, served as `assets/<prefix>/dashboard.css`. Plain CSS, sized
 * so that 128 chain tiles and a 32-wide grid of 1,024 rollouts fit a laptop screen.
 */
export const PAGE_CSS = `
:root { --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --bg: #ffffff; --panel: #f6f8fa;
  --ok: #1a7f37; --ok-bg: #dafbe1; --arriving: #0969da; --behind: #9a6700; --behind-bg: #fff8c5;
  --bad: #d1242f; --bad-bg: #ffebe9; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: var(--bg); font-size: 13px; }
header.top { display: flex; flex-wrap: wrap; align-items: baseline; gap: 8px 16px; padding: 10px 16px; background: var(--panel); border-bottom: 1px solid var(--line); }
header.top h1 { font-size: 18px; margin: 0; }
.connection { padding: 1px 8px; border-radius: 10px; font-weight: 600; background: var(--behind-bg); color: var(--behind); }
.connection[data-state=live] { background: var(--ok-bg); color: var(--ok); }
.connection[data-state=reconnecting], .connection[data-state=stale] { background: var(--bad-bg); color: var(--bad); }
.facts { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0; flex-basis: 100%; }
.fact { display: flex; gap: 6px; }
.fact dt { color: var(--muted); }
.fact dd { margin: 0; font-weight: 600; }
main { padding: 8px 16px 24px; display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 12px 24px; }
#chain-section, #series-section { grid-column: 1 / -1; }
@media (max-width: 1100px) { main { grid-template-columns: minmax(0, 1fr); } }
h2 { font-size: 15px; margin: 10px 0 6px; }
h2 small { font-weight: 400; color: var(--muted); margin-left: 8px; }
h3 { font-size: 12px; margin: 4px 0; color: var(--muted); font-weight: 600; }
.chain { display: flex; flex-wrap: wrap; gap: 4px; }
.tile { width: 84px; min-height: 42px; padding: 2px 4px; border: 1px solid var(--line); border-radius: 4px; background: var(--ok-bg); font-size: 11px; line-height: 1.25; overflow: hidden; }
.tile-top { display: flex; justify-content: space-between; gap: 2px; }
.tile-id { font-weight: 600; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.tile-pos { color: var(--muted); }
.tile.master { border: 2px solid var(--fg); }
.tile.master .tile-pos { color: var(--fg); font-weight: 700; }
.tile.arriving { background: #ddf4ff; }
.tile.behind { background: var(--behind-bg); }
.tile.unreported { background: #eaeef2; border-style: dashed; }
.tile.suspected { background: var(--bad-bg); border: 2px dashed var(--bad); }
.tile.dead { background: #eaeef2; color: var(--muted); border-color: var(--bad); }
.tile.dead .tile-note { color: var(--bad); font-weight: 700; }
.tile.demoted { background: repeating-linear-gradient(45deg, var(--behind-bg), var(--behind-bg) 4px, #f5e0a0 4px, #f5e0a0 8px); }
.tile.outside { opacity: 0.75; }
.tile-bar { position: relative; height: 12px; margin-top: 2px; background: #eaeef2; border-radius: 2px; overflow: hidden; }
.tile-fill { position: absolute; left: 0; top: 0; bottom: 0; background: var(--arriving); opacity: 0.45; }
.tile-bar-text { position: relative; font-size: 10px; padding-left: 2px; }
.tile-note { font-size: 10px; }
.chain-divider { flex-basis: 100%; color: var(--muted); border-top: 1px dashed var(--line); padding-top: 2px; font-size: 11px; }
.controls { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; margin-bottom: 6px; }
.health-filter { display: inline-flex; gap: 8px; }
.versions { display: flex; height: 18px; margin-bottom: 6px; border-radius: 3px; overflow: hidden; max-width: 576px; }
.version-seg { color: #fff; font-size: 11px; padding: 1px 4px; white-space: nowrap; overflow: hidden; min-width: 0; }
.grid-box { position: relative; }
#rollout-grid { display: block; }
.tip { position: absolute; z-index: 2; white-space: pre; background: var(--fg); color: #fff; padding: 4px 6px; border-radius: 4px; font-size: 11px; pointer-events: none; }
.legend { color: var(--muted); font-size: 11px; max-width: 600px; }
.age { display: inline-block; padding: 0 4px; margin: 0 2px; color: #fff; border-radius: 2px; }
.age0 { background: #1a7f37; } .age1 { background: #7cc47f; } .age2 { background: #e3c300; } .age3 { background: #f08c00; } .age4 { background: #d1242f; } .age.none { background: #9aa0a6; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 24px; }
.chart { min-width: 0; }
/* The staleness histograms come right after the staleness chart: the charts after it move behind them. */
.hists { order: 1; flex: 1 1 280px; min-width: 280px; }
.chart[data-chart=repack], .chart[data-chart=kv] { order: 2; }
.hist-pair { display: flex; flex-wrap: wrap; gap: 8px 20px; }
.hist { flex: 1 1 240px; min-width: 0; }
.hist-title { font-size: 12px; font-weight: 600; margin-bottom: 2px; }
.hist-plot { position: relative; display: flex; align-items: flex-end; gap: 2px; height: 128px; }
.hist-plot::after { content: ""; position: absolute; left: 0; right: 0; bottom: 14px; border-top: 1px solid var(--muted); }
.hist-col { display: flex; flex-direction: column; justify-content: flex-end; flex: 1 1 0; min-width: 2px; max-width: 40px; height: 100%; }
.hist-bar { border-radius: 2px 2px 0 0; }
.hist-n { font-size: 10px; line-height: 13px; text-align: center; color: var(--muted); white-space: nowrap; }
.hist-x { font-size: 10px; line-height: 14px; height: 14px; text-align: center; color: var(--muted); white-space: nowrap; }
.hist-stats { margin-top: 4px; font-size: 11px; }
.hist-empty { height: 128px; display: flex; align-items: center; justify-content: center; color: var(--muted); border: 1px dashed var(--line); border-radius: 4px; }
.error { color: var(--bad); }
.kinds { border-collapse: collapse; margin-bottom: 8px; font-variant-numeric: tabular-nums; }
.kinds th, .kinds td { text-align: right; padding: 2px 8px; border-bottom: 1px solid #eaeef2; white-space: nowrap; }
.kinds th:first-child, .kinds td:first-child, .kinds td[data-field=results] { text-align: left; }
.kinds th { color: var(--muted); font-weight: 600; }
.muted { color: var(--muted); }
.hist.turns { max-width: 480px; }
.chips { display: flex; flex-wrap: wrap; gap: 4px; margin-bottom: 6px; }
.chip { border: 1px solid var(--line); border-radius: 10px; background: var(--panel); padding: 1px 8px; font-size: 11px; cursor: pointer; }
.chip[aria-pressed=false] { opacity: 0.4; text-decoration: line-through; }
.events { list-style: none; margin: 0; padding: 0; max-height: 420px; overflow-y: auto; border: 1px solid var(--line); border-radius: 4px; }
.event { display: grid; grid-template-columns: 64px 120px 110px 1fr; gap: 8px; padding: 2px 6px; border-bottom: 1px solid #eaeef2; }
.event-time { color: var(--muted); }
.event-subject { font-weight: 600; overflow: hidden; text-overflow: ellipsis; }
.badge { border-radius: 3px; padding: 0 4px; background: #eaeef2; justify-self: start; }
.badge.kind-relay { background: #ddf4ff; } .badge.kind-rollout { background: #fbefff; } .badge.kind-plan, .badge.kind-master { background: var(--ok-bg); }
.event[data-kind$=dead] .badge { background: var(--bad-bg); color: var(--bad); }
.event[data-kind$=suspected] .badge { background: var(--behind-bg); }
`;
