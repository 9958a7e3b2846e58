// charts.js — small inline-SVG charts drawn from history the page keeps
// itself (the admin API serves current state only).

import { h, s } from './dom.js';

export const PALETTE = ['#2563eb', '#0d9488', '#d97706', '#7c3aed', '#db2777', '#65a30d', '#0891b2', '#dc2626'];

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/**
 * lineChart draws one line per series over a shared time axis.
 * series: [{name, color, points: [{t (ms), v}]}]; opts.max fixes the y
 * range (e.g. 1 for ratios); opts.format labels the y axis; opts.from and
 * opts.to (ms) fix the time axis; opts.left widens the y-label margin.
 */
export function lineChart(series, opts = {}) {
  const W = 560, H = 160, L = opts.left || 40, R = 8, T = 10, B = 22;
  const pts = series.flatMap((x) => x.points);
  const root = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': opts.label || 'chart' });
  if (pts.length === 0) {
    root.appendChild(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'chart-empty' }, opts.empty || 'No data yet'));
    return root;
  }
  // the axis spans opts.from..opts.to when given, else the history
  // actually held, up to the window
  const tMax = opts.to !== undefined ? opts.to : Math.max(...pts.map((p) => p.t));
  const tMin = opts.from !== undefined ? opts.from : Math.max(tMax - (opts.windowMs || 300000), Math.min(...pts.map((p) => p.t)));
  const yMax = opts.max || niceMax(Math.max(...pts.map((p) => p.v)));
  const x = (t) => L + ((t - tMin) / Math.max(1, tMax - tMin)) * (W - L - R);
  const y = (v) => T + (1 - v / yMax) * (H - T - B);
  const fmt = opts.format || ((v) => String(Math.round(v * 10) / 10));
  for (const f of [0, 0.5, 1]) {
    const v = yMax * f;
    root.appendChild(s('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'chart-grid' }));
    root.appendChild(s('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'chart-axis' }, fmt(v)));
  }
  const span = tMax - tMin;
  const spanText = span < 120000 ? `−${Math.max(1, Math.round(span / 1000))} s` : `−${Math.round(span / 60000)} min`;
  root.appendChild(s('text', { x: L, y: H - 5, class: 'chart-axis' }, spanText));
  root.appendChild(s('text', { x: W - R, y: H - 5, 'text-anchor': 'end', class: 'chart-axis' }, 'now'));
  for (const ser of series) {
    if (ser.points.length === 0) continue;
    const d = ser.points.map((p, i) => `${i ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(Math.min(p.v, yMax)).toFixed(1)}`).join('');
    root.appendChild(s('path', { d, class: 'chart-line', stroke: ser.color }));
    const last = ser.points[ser.points.length - 1];
    root.appendChild(s('circle', { cx: x(last.t), cy: y(Math.min(last.v, yMax)), r: 2.5, fill: ser.color }));
  }
  return root;
}

export function legend(series) {
  return h('div', { class: 'legend' }, series.map((x) =>
    h('span', { class: 'legend-item' }, h('span', { class: 'swatch', style: { background: x.color } }), x.name)));
}

/** A sparkline for one series, scaled to its own maximum. */
export function sparkline(points, color) {
  const W = 96, H = 24;
  const root = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'spark', role: 'img', 'aria-label': 'trend' });
  if (points.length < 2) return root;
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  const max = Math.max(1, ...points.map((p) => p.v));
  const d = points.map((p, i) =>
    `${i ? 'L' : 'M'}${((p.t - t0) / Math.max(1, t1 - t0) * (W - 2) + 1).toFixed(1)},${(H - 2 - (p.v / max) * (H - 4)).toFixed(1)}`).join('');
  root.appendChild(s('path', { d, class: 'chart-line', stroke: color }));
  return root;
}
