// serving.js — the route page: how each route and provider group is
// actually serving across every router, over the last 5 or 60 minutes —
// requests/s, each target's observed share beside its configured weight
// (for strategies that read weights), TTFT and latency p50/p90, errors,
// retries, and the engine-reported prefix-cache hit rate. Figures come
// from each router's in-memory ring, summed by the admin API.

import * as api from './api.js';
import { h, replace, pct, fixed, int, meter } from './dom.js';
import { lineChart, legend, PALETTE } from './charts.js';
import { Catalog } from './strategies.js';

const WINDOWS = [['5m', 'Last 5 minutes'], ['60m', 'Last 60 minutes']];

function normURL(u) { return (u || '').trim().toLowerCase().replace(/\/+$/, '').replace(/\/v1$/, ''); }

function msText(v) {
  if (v === null || v === undefined) return '—';
  return v >= 1000 ? fixed(v / 1000, 2) + ' s' : fixed(v, v < 10 ? 1 : 0) + ' ms';
}

/** The configured weight of a stats target ("provider/model" label) in its pool. */
function configuredWeights(cfg) {
  if (!cfg) return null;
  const out = new Map();
  const total = cfg.targets.reduce((a, t) => a + (t.weight > 0 ? t.weight : 0), 0);
  for (const t of cfg.targets) {
    const label = cfg.isGroup ? `${t.provider}/${t.model || '*'}` : `${t.provider}/${t.model || cfg.model}`;
    out.set(label, { weight: t.weight, share: total > 0 ? t.weight / total : 0 });
  }
  return out;
}

function card(route, win, env, i0) {
  const w = route.windows[win];
  const cfg = env.pools.get(route.pool);
  const reads = cfg && env.catalog.usesWeights(cfg.strategy);
  const weights = reads ? configuredWeights(cfg) : null;
  const colors = new Map(w.targets.map((t, i) => [t.target, PALETTE[(i0 + i) % PALETTE.length]]));
  const step = w.stepSeconds || 10;
  const rate = w.targets.map((t) => ({ name: t.target, color: colors.get(t.target),
    points: t.points.map((p) => ({ t: p.t, v: p.attempts / step })) }));
  const lat = w.targets.map((t) => ({ name: t.target, color: colors.get(t.target),
    points: t.points.filter((p) => p.latencyP50 !== null).map((p) => ({ t: p.t, v: p.latencyP50 })) }));
  // both charts span the whole window, even where no request came
  const slots = w.targets.length ? w.targets[0].points : [];
  const span = slots.length ? { from: slots[0].t, to: slots[slots.length - 1].t } : {};
  // the responses' own cached_tokens first; else what the engine's sidecar
  // gossips for the whole engine
  const hit = (t) => {
    if (t.hitRate !== null) return h('span', { class: 'hit', title: 'cached ÷ prompt tokens the engine reported in these responses (usage.prompt_tokens_details.cached_tokens)' }, pct(t.hitRate, 1));
    const p = env.providers.get(t.provider);
    const e = p && env.engines.find((x) => normURL(x.engineUrl) === normURL(p.apiBase));
    return e && e.hitRate !== null
      ? h('span', { class: 'hit', title: 'the whole engine\'s rate, as its sidecar reports it (vLLM prefix-cache hits ÷ queries)' }, pct(e.hitRate), h('span', { class: 'muted small' }, ' engine'))
      : h('span', { class: 'muted small', title: 'no cached_tokens in the responses and no sidecar reporting this engine' }, 'not reported');
  };
  const stat = (label, value, cls) => h('div', { class: ['mini-stat', cls] }, h('div', { class: 'stat-label' }, label), h('div', { class: 'mini-value' }, value));
  return h('section', { class: 'card serving', 'data-pool': route.pool },
    h('div', { class: 'editor-head' },
      h('div', {}, h('h2', {}, route.pool),
        h('div', { class: 'muted small' }, (cfg ? `${cfg.isGroup ? 'provider group' : 'route'} · ${cfg.strategy}` : 'no longer configured'),
          ` · reported by ${route.nodes.length} router${route.nodes.length === 1 ? '' : 's'} (${route.nodes.join(', ')})`)),
      h('div', { class: 'mini-stats' },
        stat('Requests', h('span', { class: 'req-count' }, int(w.requests))),
        stat('Requests/s', fixed(w.rps, 2)),
        stat('Error rate', pct(w.errorRate, 1), w.errorRate > 0.05 ? 'bad' : ''),
        stat('Retries', h('span', { class: 'retry-count' }, int(w.retries))))),
    h('div', { class: 'table-wrap' }, h('table', { class: 'table compact serving-targets' },
      h('thead', {}, h('tr', {}, ['Target', 'Observed share', reads ? 'Configured' : null, 'Attempts', 'TTFT p50 / p90', 'Latency p50 / p90', 'Errors', 'Prefix-cache hit']
        .filter(Boolean).map((c) => h('th', {}, c)))),
      h('tbody', {}, w.targets.map((t) => {
        const cw = weights && weights.get(t.target);
        return h('tr', { 'data-target': t.target },
          h('td', { class: 'strong' }, h('span', { class: 'dot', style: { background: colors.get(t.target) } }), t.target),
          h('td', { class: 'share-cell' }, h('div', { class: 'meter-row' }, meter(t.share), h('span', { class: 'small observed-share' }, pct(t.share, 1)))),
          reads ? h('td', { class: 'small muted' }, cw ? `${pct(cw.share, 1)} (weight ${cw.weight})` : '—') : null,
          h('td', { class: 'num attempts' }, int(t.attempts)),
          h('td', { class: 'num nowrap' }, `${msText(t.ttftP50)} / ${msText(t.ttftP90)}`),
          h('td', { class: 'num nowrap' }, `${msText(t.latencyP50)} / ${msText(t.latencyP90)}`),
          h('td', { class: ['num', t.errors > 0 && 'hot'] }, t.errors ? `${int(t.errors)} (${pct(t.errorRate, 1)})` : '0'),
          h('td', { class: 'num hit-cell' }, hit(t)));
      })))),
    h('div', { class: 'grid2 charts' },
      h('div', {}, h('h3', {}, 'Requests/s per target'), lineChart(rate, { ...span, label: 'requests per second', windowMs: w.seconds * 1000, format: (v) => fixed(v, v < 10 ? 1 : 0) }), legend(rate)),
      h('div', {}, h('h3', {}, 'Latency p50 per target'), lineChart(lat, { ...span, left: 56, label: 'latency p50', windowMs: w.seconds * 1000, format: (v) => msText(v), empty: 'No request in this window' }), legend(lat.filter((x) => x.points.length)))));
}

export function mount(root, ctx) {
  const every = ctx.refreshMs(5000);
  let timer = null;
  let stopped = false;
  let win = '5m';
  const pick = h('select', { id: 'serving-window', 'aria-label': 'Window' }, WINDOWS.map(([v, l]) => h('option', { value: v }, l)));
  const body = h('div', { id: 'serving-body' }, h('p', { class: 'muted' }, 'Loading…'));
  let last = null;
  let env = null;
  pick.addEventListener('change', () => { win = pick.value; draw(); });

  function draw() {
    if (!last) return;
    if (!last.routes.length) {
      replace(body, h('div', { class: 'empty-state', id: 'serving-empty' },
        h('h2', {}, 'No traffic in the last hour'),
        h('p', {}, 'No router has reported a request yet. Each router counts its own upstream attempts and shares them with the others every 15 seconds; send a request through any router and it shows up here.')));
      return;
    }
    replace(body, last.routes.map((r, i) => card(r, win, env, i * 2)));
  }

  async function tick() {
    try {
      const [stats, rs, gs, ps, cl, st] = await Promise.all([api.routeStats(), api.routes(), api.groups(),
        api.providers(), api.cluster().catch(() => ({ engines: [] })), api.strategies().catch(() => null)]);
      if (stopped) return;
      const pools = new Map();
      for (const r of rs) pools.set(r.model, Object.assign({ isGroup: false }, r));
      for (const g of gs) pools.set(g.slug + '/*', Object.assign({ isGroup: true }, g));
      env = { pools, catalog: new Catalog(st), providers: new Map(ps.map((p) => [p.name, p])), engines: cl.engines };
      last = stats;
      draw();
    } catch (e) {
      if (e.unauthorized || stopped) return;
      replace(body, h('div', { class: 'banner bad' }, 'Could not load the route stats: ' + e.message));
    }
    if (!stopped) timer = setTimeout(tick, every);
  }
  replace(root,
    h('header', { class: 'screen-head' },
      h('div', {}, h('h1', {}, 'Serving'), h('p', { class: 'muted' }, 'How each route and provider group is serving, across every router.')),
      h('label', { class: 'picker-label', for: 'serving-window' }, 'Window', pick)),
    body,
    h('p', { class: 'muted small' }, 'Kept in memory by each router for an hour (10-second steps over 5 minutes, 1-minute steps over 60); Grafana has the long history. Percentiles are read from log-scale buckets, within about 20 %.'));
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
