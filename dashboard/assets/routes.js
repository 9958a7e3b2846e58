// routes.js — the Routes & provider groups screen: each route's and group's
// targets, weights and strategy, editable where not read-only.
//
// Rules from the spec this screen keeps:
//   - the picker offers every strategy except adaptive, but always shows the
//     value the route holds, even one it would not offer;
//   - saving sends the strategy only if the operator touched the picker;
//   - a traffic share is shown only for strategies that read weights;
//   - precise_cache_aware / lmcache_aware carry a hint saying, per target,
//     whether a telemetry source is live, from what the sidecars gossip.

import * as api from './api.js';
import { h, replace, age, pct, badge } from './dom.js';
import { Catalog } from './strategies.js';
import { confirm, fileBadge, whyLocked, actionButton, roleBanner, messageLine, showIn } from './forms.js';
import { routeForm } from './routeform.js';

const SOURCE = {
  kv_events: {
    what: 'a KV-event stream',
    why: 'scores the exact prompt blocks resident on each target, which it learns from the KV events a rolter sidecar beside the engine publishes',
    where: 'Where it is set: on the engine (vLLM KV events enabled) and the rolter sidecar running beside it, not on this route or its providers.',
  },
  lmcache: {
    what: 'an LMCache signal',
    why: 'prefers targets whose LMCache has free capacity, which it learns from the LMCache controller a rolter sidecar beside the engine polls',
    where: 'Where it is set: on the rolter sidecar beside the engine, pointed at its LMCache controller, not on this route or its providers.',
  },
};

function normURL(u) { return (u || '').trim().toLowerCase().replace(/\/+$/, '').replace(/\/v1$/, ''); }

/** Where each target's telemetry would come from, and whether it is live now. */
function sources(item, kind, env) {
  const rows = [];
  const judge = (label, engines) => {
    if (!engines.length) { rows.push({ label, live: false, detail: 'no sidecar reports this engine' }); return; }
    for (const e of engines) {
      if (kind === 'kv_events') {
        const live = e.kvEvents && e.state !== 'STALE';
        rows.push({ label, live, detail: e.kvEvents || e.state === 'STALE' ? `${e.nodeId}: KV events ${e.state}, ${age(e.ageMs)} old` : `${e.nodeId}: sidecar has no KV-event stream` });
      } else {
        const live = e.lmcache && e.lmcacheOccupancy !== null;
        rows.push({ label, live, detail: live ? `${e.nodeId}: LMCache ${pct(e.lmcacheOccupancy)} occupied` : `${e.nodeId}: no LMCache signal` });
      }
    }
  };
  if (item.discover) {
    const engines = env.engines.filter((e) => e.models.includes(item.model));
    if (!engines.length) rows.push({ label: 'discovered targets', live: false, detail: `no engine in the mesh announces ${item.model}` });
    for (const e of engines) judge(e.nodeId, [e]);
    return rows;
  }
  for (const t of item.targets) {
    const label = t.model ? `${t.provider} · ${t.model}` : t.provider;
    const p = env.providers.get(t.provider);
    if (!p) { rows.push({ label, live: false, detail: 'provider not found' }); continue; }
    judge(label, env.engines.filter((e) => normURL(e.engineUrl) === normURL(p.apiBase)));
  }
  return rows;
}

function telemetryHint(strategy, kind, item, env) {
  const src = SOURCE[kind];
  const rows = sources(item, kind, env);
  const live = rows.filter((r) => r.live).length;
  return h('div', { class: ['hint', live === rows.length && rows.length ? 'hint-ok' : 'hint-warn'], 'data-hint': kind },
    h('div', { class: 'hint-title' }, `Needs a telemetry source — live on ${live} of ${rows.length} target${rows.length === 1 ? '' : 's'}`),
    h('p', {}, `${strategy} ${src.why}. A target without ${src.what} is scored neutral; with none live, the route runs on the least-load fallback without any error.`),
    h('p', { class: 'muted small' }, src.where),
    h('ul', { class: 'sources' }, rows.map((r) =>
      h('li', { class: r.live ? 'src-live' : 'src-dead' }, h('span', { class: 'src-mark' }, r.live ? '✓' : '✕'),
        h('span', { class: 'strong' }, r.label), ' — ', r.live ? 'live' : 'not live', h('span', { class: 'muted' }, ` (${r.detail})`)))));
}

function optionLabel(s, catalog) {
  const n = catalog.needsTelemetry(s);
  return n ? `${s} — needs ${n === 'kv_events' ? 'KV events' : 'LMCache'}` : s;
}

/** A <select> offering every strategy but adaptive, always holding the current value. */
function picker(held, catalog, disabled) {
  const sel = h('select', { class: 'strategy-picker', disabled, 'aria-label': 'Strategy' });
  const offered = catalog.offered().map((x) => x.name);
  if (!offered.includes(held)) {
    const why = held === 'adaptive' ? 'governed by the adaptive routing policy' : 'not offered here';
    sel.appendChild(h('option', { value: held }, `${held || '(none)'} (current — ${why})`));
  }
  for (const n of offered) sel.appendChild(h('option', { value: n }, optionLabel(n, catalog)));
  sel.value = held;
  return sel;
}

function editor(item, isGroup, env, ctx) {
  let current = item;
  let touched = false;
  const locked = whyLocked(ctx, item);
  const sel = picker(item.strategy, env.catalog, !!locked);
  if (locked) sel.title = locked;
  const inputs = item.targets.map((t) => h('input', { type: 'number', class: 'weight', min: 1, step: 1, value: String(t.weight),
    disabled: !!locked, 'aria-label': `Weight of ${t.provider}` }));
  const shareCells = item.targets.map(() => h('td', { class: 'share' }));
  const notes = h('div', { class: 'notes' });
  const msg = h('p', { class: 'card-msg', role: 'status' });
  const save = h('button', { class: 'btn primary save', disabled: true }, 'Save');
  const reset = h('button', { class: 'btn ghost reset', disabled: true }, 'Reset');

  const strategy = () => sel.value;
  const weights = () => inputs.map((i) => Number(i.value));
  const weightsChanged = () => weights().some((w, i) => w !== current.targets[i].weight);
  const dirty = () => (touched && sel.value !== current.strategy) || weightsChanged();

  function update() {
    const s = strategy();
    const reads = env.catalog.usesWeights(s);
    const ws = weights();
    const total = ws.reduce((a, b) => a + (isFinite(b) && b > 0 ? b : 0), 0);
    shareCells.forEach((cell, i) => {
      const share = total > 0 && ws[i] > 0 ? ws[i] / total : 0;
      replace(cell, reads
        ? h('div', { class: 'meter-row' }, h('span', { class: 'meter' }, h('span', { class: 'meter-fill', style: { width: (share * 100).toFixed(1) + '%' } })),
          h('span', { class: 'small' }, pct(share)))
        : h('span', { class: 'muted small' }, 'ignored'));
    });
    const parts = [];
    if (item.discover) parts.push(h('p', { class: 'note' }, `Targets are discovered from the mesh: every engine whose sidecar announces ${item.model}.`));
    else if (reads) {
      parts.push(h('p', { class: 'note' }, s === 'adaptive'
        ? 'adaptive reads these weights in its fallback stack, which serves the route until the blend engages.'
        : s === 'pipeline' ? 'Traffic share by weight: pipeline\'s static-weight scorer reads these; its other scorers can move traffic too.'
          : `Traffic share by weight: ${s} follows these weights.`));
    } else {
      parts.push(h('p', { class: 'note weights-ignored' }, `${s} ignores weights: they are stored but never consulted.`));
    }
    if (s === 'adaptive') {
      parts.push(h('p', { class: 'hint' }, 'adaptive is governed by the deployment-wide policy, not by this editor. ',
        h('a', { href: '#/adaptive/settings' }, 'Adaptive Routing → Settings')));
    }
    const kind = env.catalog.needsTelemetry(s);
    if (kind) parts.push(telemetryHint(s, kind, item, env));
    replace(notes, parts);
    save.disabled = !dirty();
    reset.disabled = !dirty();
  }

  sel.addEventListener('change', () => { touched = true; msg.textContent = ''; update(); });
  inputs.forEach((i) => i.addEventListener('input', () => { msg.textContent = ''; update(); }));
  reset.addEventListener('click', () => {
    touched = false;
    sel.value = current.strategy;
    inputs.forEach((inp, i) => { inp.value = String(current.targets[i].weight); });
    msg.textContent = '';
    update();
  });
  save.addEventListener('click', async () => {
    const edits = {};
    if (touched && sel.value !== current.strategy) edits.strategy = sel.value;
    if (weightsChanged()) {
      const ws = weights();
      // Range rules are the server's; only a non-number is caught here.
      const bad = inputs.findIndex((inp) => inp.value.trim() === '' || !isFinite(Number(inp.value)));
      if (bad >= 0) { msg.className = 'card-msg error'; msg.textContent = `Weight of ${current.targets[bad].provider} needs a number.`; return; }
      edits.weights = ws;
    }
    save.disabled = true;
    try {
      current = isGroup ? await api.saveGroup(current, edits) : await api.saveRoute(current, edits);
      touched = false;
      sel.value = current.strategy;
      inputs.forEach((inp, i) => { if (current.targets[i]) inp.value = String(current.targets[i].weight); });
      msg.className = 'card-msg ok';
      msg.textContent = 'Saved. Every router applies it with the next config version.';
    } catch (e) {
      msg.className = 'card-msg error';
      msg.textContent = e.message;
    }
    update();
  });

  const title = isGroup ? item.name : item.model;
  const what = isGroup ? 'provider group' : 'route';
  const edit = actionButton('Edit', { class: 'btn small edit', 'aria-label': `Edit ${what} ${title}`,
    onclick: () => ctx.openForm(isGroup ? 'group' : 'route', current) }, locked);
  const del = actionButton('Delete', { class: 'btn small danger-ghost delete', 'aria-label': `Delete ${what} ${title}`, onclick: async () => {
    const detail = isGroup ? `Clients addressing ${item.slug}/… get 404 from every router once the change applies.`
      : `Clients asking for ${title} get 404 from every router once the change applies; API keys that list it keep the name.`;
    if (!await confirm(`Delete ${what} ${title}?`, detail, `Delete ${title}`)) return;
    try {
      await (isGroup ? api.deleteGroup(item.name) : api.deleteRoute(item.model));
      ctx.reload(`Deleted ${what} ${title}.`);
    } catch (e) {
      if (!e.unauthorized) { msg.className = 'card-msg error'; msg.textContent = e.message; }
    }
  } }, locked);
  const card = h('section', { class: 'card editor', 'data-kind': isGroup ? 'group' : 'route', 'data-key': item.key },
    h('div', { class: 'editor-head' },
      h('div', {}, h('h2', {}, title),
        h('div', { class: 'editor-meta' },
          isGroup ? h('span', { class: 'mono muted small' }, `${item.slug}/<model>`) : null,
          item.discover ? badge('discover', 'neutral') : null,
          item.maxLoras ? badge(`max_loras ${item.maxLoras}`, 'neutral') : null,
          item.enabled === false ? badge('disabled', 'warn', 'clients get 404 until it is enabled again') : null,
          item.readonly ? fileBadge() : null)),
      h('div', { class: 'editor-tools' }, h('label', { class: 'picker-label' }, 'Strategy', sel), edit, del)),
    item.discover ? null : h('table', { class: 'table compact' },
      h('thead', {}, h('tr', {}, [isGroup ? 'Member' : 'Provider', 'Upstream model', 'Weight', 'Traffic share'].map((c) => h('th', {}, c)))),
      h('tbody', {}, item.targets.map((t, i) => h('tr', {},
        h('td', { class: 'strong' }, t.provider), h('td', { class: 'mono small' }, t.model || (isGroup ? 'passthrough' : '—')),
        h('td', {}, inputs[i]), shareCells[i])))),
    notes,
    locked ? null : h('div', { class: 'editor-foot' }, msg, h('div', { class: 'actions' }, reset, save)));
  update();
  return card;
}

export function mount(root, ctx) {
  let stopped = false;
  const slot = h('div', { id: 'route-form-slot' });
  const page = messageLine('routes-msg');
  async function load(flash) {
    const [rs, gs, ps, cl, st] = await Promise.allSettled([api.routes(), api.groups(), api.providers(), api.cluster(), api.strategies()]);
    if (stopped) return;
    if (rs.status === 'rejected') {
      if (!rs.reason.unauthorized) replace(root, h('div', { class: 'banner bad' }, 'Could not load routes: ' + rs.reason.message));
      return;
    }
    const env = {
      catalog: new Catalog(st.status === 'fulfilled' ? st.value : null),
      providers: new Map((ps.status === 'fulfilled' ? ps.value : []).map((p) => [p.name, p])),
      engines: cl.status === 'fulfilled' ? cl.value.engines : [],
      hasEnabled: [...rs.value, ...(gs.status === 'fulfilled' ? gs.value : [])].some((x) => x.enabled !== null),
    };
    const sub = Object.assign({}, ctx, {
      reload: (text) => load(text),
      openForm: (kind, item) => showIn(slot, routeForm(kind, item, env, (name) => {
        showIn(slot, null);
        load(`Saved ${kind === 'group' ? 'provider group' : 'route'} ${name}. Every router applies it with the next config version.`);
      }, () => showIn(slot, null))),
    });
    const warnings = [];
    if (cl.status === 'rejected') warnings.push('The cluster view did not load, so telemetry sources show as not live: ' + cl.reason.message);
    if (ps.status === 'rejected') warnings.push('Providers did not load: ' + ps.reason.message);
    const locked = whyLocked(ctx, null);
    const newRoute = actionButton('New route', { class: 'btn primary', id: 'new-route', onclick: () => sub.openForm('route', null) }, locked);
    const newGroup = actionButton('New provider group', { class: 'btn', id: 'new-group', onclick: () => sub.openForm('group', null) }, locked);
    if (flash) page.ok(flash); else page.clear();
    replace(root,
      h('header', { class: 'screen-head' }, h('div', {}, h('h1', {}, 'Routes & provider groups'),
        h('p', { class: 'muted' }, 'Targets, weights and strategy per public model name and per provider group.')),
      h('div', { class: 'actions' }, newGroup, newRoute)),
      roleBanner(ctx),
      warnings.map((w) => h('div', { class: 'banner warn' }, w)),
      slot, page.el,
      h('h2', { class: 'section-title' }, 'Routes'),
      rs.value.length ? rs.value.map((r) => editor(r, false, env, sub)) : h('p', { class: 'empty', id: 'routes-empty' }, 'No routes are configured. Create a provider first, then a route over it.'),
      h('h2', { class: 'section-title' }, 'Provider groups'),
      gs.status === 'rejected' ? h('div', { class: 'banner warn' }, 'Provider groups did not load: ' + gs.reason.message)
        : gs.value.length ? gs.value.map((g) => editor(g, true, env, sub)) : h('p', { class: 'empty' }, 'No provider groups are configured.'));
  }
  replace(root, h('p', { class: 'muted' }, 'Loading routes…'));
  load();
  return () => { stopped = true; };
}
