// audit.js — the Audit log: who changed what, newest first.

import * as api from './api.js';
import { h, replace, when, badge } from './dom.js';

function detailText(d) {
  if (typeof d === 'string') return d;
  if (d && typeof d === 'object' && !Array.isArray(d)) {
    return Object.entries(d).map(([k, v]) => k + '=' + (typeof v === 'string' ? v : JSON.stringify(v))).join('  ');
  }
  try { return JSON.stringify(d); } catch { return String(d); }
}

export function mount(root, ctx) {
  let stopped = false;
  let entries = [];
  const filter = h('input', { type: 'search', id: 'audit-filter', placeholder: 'Filter by actor, action or resource', class: 'search' });
  const body = h('div');
  function draw() {
    const q = filter.value.trim().toLowerCase();
    const rows = entries.filter((e) => !q || [e.actor, e.action, e.resource, e.outcome, detailText(e.detail)].some((x) => x.toLowerCase().includes(q)));
    replace(body, rows.length
      ? h('table', { class: 'table', id: 'audit' },
        h('thead', {}, h('tr', {}, ['Time (UTC)', 'Actor', 'Action', 'Resource', 'Outcome', 'Config', 'Detail'].map((c) => h('th', {}, c)))),
        h('tbody', {}, rows.map((e) => h('tr', {},
          h('td', { class: 'mono small nowrap' }, when(e.time)),
          h('td', {}, e.actor),
          h('td', {}, h('span', { class: 'chip' }, e.action)),
          h('td', { class: 'mono small' }, e.resource),
          h('td', {}, e.outcome ? badge(e.outcome, e.outcome === 'ok' || e.outcome === 'success' ? 'ok' : 'warn') : h('span', { class: 'muted' }, '—')),
          h('td', { class: 'mono small' }, e.configVersion ? 'v' + e.configVersion : '—'),
          h('td', { class: 'mono small detail' }, detailText(e.detail))))))
      : h('p', { class: 'empty' }, entries.length ? 'No entry matches the filter.' : 'The audit log is empty.'));
  }
  async function load() {
    try {
      const list = await api.audit();
      if (stopped) return;
      // newest first: by sequence number when the server sends one, else
      // by time, entries from the same instant keeping the log's order
      entries = list.map((e, i) => ({ e, i }))
        .sort((a, b) => (a.e.seq !== null && b.e.seq !== null ? b.e.seq - a.e.seq : 0) ||
          ((Date.parse(b.e.time) || 0) - (Date.parse(a.e.time) || 0)) || b.i - a.i)
        .map((x) => x.e);
      draw();
    } catch (e) {
      if (!stopped && !e.unauthorized) replace(body, h('div', { class: 'banner bad' }, 'Could not load the audit log: ' + e.message));
    }
  }
  filter.addEventListener('input', draw);
  replace(root,
    h('header', { class: 'screen-head' },
      h('div', {}, h('h1', {}, 'Audit log'), h('p', { class: 'muted' }, 'Every change made through the admin API, newest first.')),
      h('button', Object.assign({ class: 'btn ghost', id: 'audit-refresh', onclick: load },
        ctx && ctx.role === 'viewer' ? { disabled: true, title: 'the audit log needs the admin role' } : {}), 'Refresh')),
    h('section', { class: 'card' }, filter, body));
  load();
  return () => { stopped = true; };
}
