// mesh.js — the Mesh screen: routers (Raft role, applied config version,
// convergence) and engines (queues, KV usage, residency, KV-event state,
// LMCache, adapters), refreshed live, with queue-depth and hit-rate charts
// from history kept in this page.

import * as api from './api.js';
import { h, replace, age, pct, int, meter, badge } from './dom.js';
import { lineChart, legend, sparkline, PALETTE } from './charts.js';

const WINDOW_MS = 5 * 60 * 1000;
// history survives screen switches: nodeId -> [{t, queue, hit}]
const history = new Map();

function record(view, now) {
  for (const e of view.engines) {
    let list = history.get(e.nodeId);
    if (!list) { list = []; history.set(e.nodeId, list); }
    list.push({ t: now, queue: e.running + e.waiting, hit: e.hitRate });
    while (list.length && (list[0].t < now - WINDOW_MS || list.length > 1000)) list.shift();
  }
}

function colorOf(i) { return PALETTE[i % PALETTE.length]; }

function stateBadge(e) {
  // A silent sidecar is STALE whether or not it had a KV-event stream: the
  // router drops what it knew, so the admin API reports kv_events false.
  if (!e.kvEvents && e.state !== 'STALE') return badge('no KV events', 'muted', 'this engine\'s sidecar publishes no KV-event stream');
  const cls = { EXACT: 'ok', DEGRADED: 'warn', STALE: 'bad' }[e.state] || 'bad';
  return h('span', { class: 'state' }, badge(e.state, cls), h('span', { class: 'muted small' }, age(e.ageMs)));
}

function roleBadge(role, isLeader) {
  if (isLeader || role === 'leader') return badge('leader', 'primary');
  return badge(role, role === 'follower' ? 'neutral' : 'warn');
}

function stat(label, value, sub) {
  return h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value),
    sub ? h('div', { class: 'stat-sub' }, sub) : null);
}

// queueCell shows one router's admission queue: per pool, the waiters of
// each band (critical / standard / sheddable).
function queueCell(adm) {
  if (!adm) return h('span', { class: 'muted small', title: 'admission control is off on this router, or it has not reported yet' }, 'off');
  const busy = adm.queues.filter((q) => q.critical + q.standard + q.sheddable > 0);
  if (!busy.length) return h('span', { class: 'muted small' }, 'empty');
  return busy.map((q) => h('div', { class: 'small queue', 'data-pool': q.pool, title: 'critical / standard / sheddable requests waiting' },
    h('span', { class: 'strong' }, q.pool + ' '),
    h('span', { class: 'band critical' }, int(q.critical)), ' / ',
    h('span', { class: 'band standard' }, int(q.standard)), ' / ',
    h('span', { class: 'band sheddable' }, int(q.sheddable))));
}

// saturationTable lists each engine (by target) with its saturation as
// every reporting router sees it (1: saturated); null when no router
// runs admission.
function saturationTable(routers) {
  const reporting = routers.filter((r) => r.admission);
  if (!reporting.length) return null;
  const targets = [...new Set(reporting.flatMap((r) => r.admission.saturation.map((s) => s.target)))].sort();
  return h('table', { class: 'table', id: 'saturation' },
    h('thead', {}, h('tr', {}, ['Engine (target)', ...reporting.map((r) => r.nodeId)].map((c) => h('th', {}, c)))),
    h('tbody', {}, targets.map((t) => h('tr', { 'data-target': t },
      h('td', { class: 'mono' }, t),
      reporting.map((r) => {
        const s = r.admission.saturation.find((x) => x.target === t);
        if (!s) return h('td', { class: 'muted' }, '—');
        return h('td', {}, h('div', { class: 'meter-row' }, meter(Math.min(s.value, 1), s.value >= 1 ? 'hot' : ''),
          h('span', { class: 'small' }, pct(s.value))));
      })))));
}

function render(root, view, status) {
  const converged = view.routers.filter((r) => r.appliedConfigVersion === view.configVersion).length;
  const convergence = (r) => {
    if (!r.alive) return badge('down', 'bad', 'gossip reports this router as not alive');
    if (r.appliedConfigVersion === null) return badge('unknown', 'muted', 'this router has not reported its config version');
    if (r.appliedConfigVersion === view.configVersion) return badge('converged', 'ok');
    return r.appliedConfigVersion < view.configVersion
      ? badge(`behind by ${view.configVersion - r.appliedConfigVersion}`, 'warn')
      : badge(`ahead by ${r.appliedConfigVersion - view.configVersion}`, 'neutral', 'this router applied a newer config than the one answering');
  };
  const exact = view.engines.filter((e) => e.kvEvents && e.state === 'EXACT').length;
  const queue = view.engines.reduce((n, e) => n + e.running + e.waiting, 0);
  const waiting = view.engines.reduce((n, e) => n + e.waiting, 0);

  const series = view.engines.map((e, i) => ({ name: e.nodeId, color: colorOf(i), points: (history.get(e.nodeId) || []) }));
  const queueSeries = series.map((x) => ({ ...x, points: x.points.map((p) => ({ t: p.t, v: p.queue })) }));
  const hitSeries = series.map((x) => ({ ...x, points: x.points.filter((p) => p.hit !== null).map((p) => ({ t: p.t, v: p.hit })) }));

  const routers = h('table', { class: 'table', id: 'routers' },
    h('thead', {}, h('tr', {}, ['Router', 'Admin address', 'Raft address', 'Build', 'Raft role', 'Applied config', 'Converged', 'Admission queue'].map((c) => h('th', {}, c)))),
    h('tbody', {}, view.routers.map((r) => h('tr', { 'data-node': r.nodeId },
      h('td', { class: 'strong' }, r.nodeId),
      h('td', { class: 'mono admin-addr' }, r.address || h('span', { class: 'muted', title: 'this router has not reported its admin address yet' }, '—')),
      h('td', { class: 'mono muted small' }, r.raftAddr || '—'),
      h('td', { class: 'mono muted build' }, r.build || '—'),
      h('td', {}, roleBadge(r.raftRole, r.nodeId === view.leader)),
      h('td', { class: 'num' }, r.appliedConfigVersion === null ? '—' : 'v' + r.appliedConfigVersion),
      h('td', { class: 'converged' }, convergence(r)),
      h('td', { class: 'admission-queue' }, queueCell(r.admission))))));
  const saturated = saturationTable(view.routers);

  const engines = h('table', { class: 'table', id: 'engines' },
    h('thead', {}, h('tr', {}, ['Engine', 'Running / waiting', 'Queued prefill', 'KV usage', 'Resident blocks', 'KV events', 'LMCache', 'Adapters', 'Queue']
      .map((c) => h('th', {}, c)))),
    h('tbody', {}, view.engines.map((e, i) => h('tr', { 'data-node': e.nodeId },
      h('td', {}, h('div', { class: 'strong' }, h('span', { class: 'dot', style: { background: colorOf(i) } }), e.nodeId),
        e.models.map((m) => h('div', { class: 'small model' }, m)),
        h('div', { class: 'mono muted small' }, e.engineUrl)),
      h('td', { class: 'rw' }, h('span', { class: 'running' }, int(e.running)), h('span', { class: 'muted' }, ' / '),
        h('span', { class: ['waiting', e.waiting > 0 && 'hot'] }, int(e.waiting))),
      h('td', { class: 'num nowrap prefill', title: 'prompt tokens this router estimates are waiting for prefill on the engine (its own requests without a first token plus the other routers\' gossiped sums)' },
        e.queuedPrefill ? int(e.queuedPrefill) + ' tok' : h('span', { class: 'muted' }, '0')),
      h('td', {}, h('div', { class: 'meter-row' }, meter(e.kvUsage, e.kvUsage > 0.9 ? 'hot' : ''), h('span', { class: 'small' }, pct(e.kvUsage)))),
      h('td', { class: 'num blocks' }, int(e.residentBlocks)),
      h('td', { class: 'kvstate' }, stateBadge(e)),
      h('td', {}, e.lmcache && e.lmcacheOccupancy !== null
        ? h('div', { class: 'meter-row' }, meter(e.lmcacheOccupancy, 'teal'), h('span', { class: 'small' }, pct(e.lmcacheOccupancy)))
        : h('span', { class: 'muted small' }, e.lmcache ? 'no signal' : '—')),
      h('td', {}, e.adapters.length ? e.adapters.map((a) => h('span', { class: 'chip' }, a)) : h('span', { class: 'muted small' }, 'none')),
      h('td', {}, sparkline((history.get(e.nodeId) || []).map((p) => ({ t: p.t, v: p.queue })), colorOf(i)))))));

  replace(root,
    h('header', { class: 'screen-head' },
      h('div', {}, h('h1', {}, 'Mesh'), h('p', { class: 'muted' }, 'Routers, engines and what their sidecars report over gossip.')),
      h('div', { class: ['live', status.error && 'live-error'], id: 'mesh-status' },
        h('span', { class: 'live-dot' }), status.error ? 'Refresh failed: ' + status.error : 'Live · every ' + (status.every / 1000) + ' s')),
    h('div', { class: 'stats' },
      stat('Config version', 'v' + view.configVersion, `${converged} of ${view.routers.length} routers converged`),
      stat('Raft leader', view.leader || 'none', view.leader ? `${view.routers.length} voters` : 'no leader elected'),
      stat('Engines', String(view.engines.length), `${exact} with exact KV state`),
      stat('Queue depth', String(queue), `${waiting} waiting`)),
    h('div', { class: 'grid2' },
      h('section', { class: 'card' }, h('h2', {}, 'Queue depth', h('span', { class: 'muted small' }, ' running + waiting, per engine')),
        lineChart(queueSeries, { label: 'queue depth', windowMs: WINDOW_MS }), legend(queueSeries)),
      h('section', { class: 'card' }, h('h2', {}, 'Prefix-cache hit rate', h('span', { class: 'muted small' }, ' per engine')),
        lineChart(hitSeries, { label: 'hit rate', max: 1, windowMs: WINDOW_MS, format: (v) => Math.round(v * 100) + '%',
          empty: 'No engine reports a hit rate' }), legend(hitSeries.filter((x) => x.points.length)))),
    h('section', { class: 'card' }, h('h2', {}, 'Routers'), h('div', { class: 'table-wrap' }, routers)),
    h('section', { class: 'card' }, h('h2', {}, 'Engines'),
      view.engines.length ? h('div', { class: 'table-wrap' }, engines) : h('p', { class: 'empty' }, 'No sidecar is reporting an engine yet.')),
    saturated ? h('section', { class: 'card' }, h('h2', {}, 'Engine saturation',
      h('span', { class: 'muted small' }, ' against the [admission] thresholds, as each router sees it (reported every 15 s)')),
    h('div', { class: 'table-wrap' }, saturated)) : null);
}

export function mount(root, ctx) {
  const every = ctx.refreshMs(2000);
  let timer = null;
  let stopped = false;
  let last = null;
  replace(root, h('p', { class: 'muted' }, 'Loading the mesh…'));
  async function tick() {
    let error = '';
    try {
      last = await api.cluster();
      record(last, Date.now());
    } catch (e) {
      if (e.unauthorized) return;
      error = e.message;
    }
    if (stopped) return;
    if (last) render(root, last, { every, error });
    else replace(root, h('div', { class: 'banner bad' }, 'Could not load the mesh: ' + error));
    timer = setTimeout(tick, every);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
