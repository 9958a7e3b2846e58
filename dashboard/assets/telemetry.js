// telemetry.js — Adaptive Routing → Telemetry: the current report from
// every gateway balancing an adaptive route. It is current state, not
// history; the control plane already hides reports older than
// fresh_window_secs.

import * as api from './api.js';
import { h, replace, fixed, int, age, since, badge, pct } from './dom.js';

const MODES = [
  { key: 'blend', label: 'Blend' },
  { key: 'exploration', label: 'Exploration' },
  { key: 'fallback', label: 'Fallback' },
];

function splitBar(d) {
  const total = d.blend + d.exploration + d.fallback;
  const bar = h('div', { class: 'split', role: 'img', 'aria-label': 'decision split' },
    MODES.map((m) => d[m.key] > 0 ? h('span', { class: 'split-seg mode-' + m.key, title: `${m.label}: ${d[m.key]}`,
      style: { width: (d[m.key] / total * 100).toFixed(2) + '%' } }) : null));
  if (total === 0) bar.appendChild(h('span', { class: 'split-empty' }, 'no decisions yet'));
  const key = h('div', { class: 'split-key' }, MODES.map((m) =>
    h('span', { class: 'key-item', 'data-mode': m.key }, h('span', { class: 'swatch mode-' + m.key }), m.label, ' ',
      h('span', { class: 'key-count' }, int(d[m.key])), total ? h('span', { class: 'muted' }, ` (${pct(d[m.key] / total)})`) : null)));
  return h('div', { class: 'split-wrap' }, bar, key);
}

function policyLine(node, stored) {
  if (!node.policy) return null;
  const p = node.policy;
  const same = stored && p.enabled === stored.enabled && p.latencyWeight === stored.latencyWeight && p.costWeight === stored.costWeight &&
    p.loadWeight === stored.loadWeight && p.explorationRatio === stored.explorationRatio && p.minSamples === stored.minSamples;
  return h('div', { class: 'node-policy small' },
    h('span', { class: 'muted' }, 'Running policy: '),
    `${p.enabled ? 'on' : 'off'} · latency ${fixed(p.latencyWeight)} · cost ${fixed(p.costWeight)} · load ${fixed(p.loadWeight)} · exploration ${pct(p.explorationRatio, 1)} · min ${int(p.minSamples)}`,
    ' ', stored ? (same ? badge('converged', 'ok') : badge('lags the stored policy', 'warn')) : null);
}

function scoreCell(v) {
  return h('div', { class: 'meter-row' }, h('span', { class: 'meter thin' }, h('span', { class: 'meter-fill', style: { width: (Math.max(0, Math.min(1, v)) * 100).toFixed(1) + '%' } })),
    h('span', { class: 'mono' }, fixed(v, 3)));
}

function nodeCard(node, stored) {
  const top = node.targets.reduce((best, t, i) => (best < 0 || t.score > node.targets[best].score ? i : best), -1);
  return h('div', { class: 'node', 'data-node': node.nodeId },
    h('div', { class: 'node-head' },
      h('div', {}, h('span', { class: 'strong' }, node.nodeId), ' ',
        node.engaged ? badge('Blend active', 'ok blend-state') : badge('Blend not engaged — fallback', 'muted blend-state')),
      h('div', { class: 'muted small' }, `${int(node.observed)} requests observed · reported ${since(node.reportedAt)}`)),
    splitBar(node.decisions),
    policyLine(node, stored),
    h('table', { class: 'table compact targets' },
      h('thead', {}, h('tr', {},
        h('th', {}, 'Target'), h('th', {}, 'Score'), h('th', {}, 'Latency'), h('th', {}, 'Cost'), h('th', {}, 'Load'),
        h('th', { class: 'raw' }, 'Latency ms'), h('th', { class: 'raw' }, '$ / Mtok'), h('th', { class: 'raw' }, 'In flight'),
        h('th', { class: 'raw' }, 'Picks'), h('th', { class: 'raw' }, 'Last pick'))),
      h('tbody', {}, node.targets.map((t, i) => h('tr', { 'data-target': t.target, class: node.engaged && i === top ? 'preferred' : '' },
        h('td', {}, h('div', { class: 'strong' }, t.target, node.engaged && i === top ? badge('Preferred', 'primary preferred-badge') : null),
          h('div', { class: 'muted small' }, `${t.provider} · ${t.upstreamModel}`)),
        h('td', { class: 'score' }, scoreCell(t.score)),
        h('td', { class: 'mono' }, fixed(t.latencyScore, 3)),
        h('td', { class: 'mono' }, fixed(t.costScore, 3)),
        h('td', { class: 'mono' }, fixed(t.loadScore, 3)),
        h('td', { class: 'mono raw' }, t.latencyMs === null ? '—' : int(t.latencyMs)),
        h('td', { class: 'mono raw' }, t.costPerMtok === null ? '—' : fixed(t.costPerMtok, 2)),
        h('td', { class: 'mono raw' }, int(t.inFlight)),
        h('td', { class: 'mono raw' }, int(t.samples)),
        h('td', { class: 'mono raw' }, age(t.lastSampleAgeMs)))))));
}

function routeList(names) {
  return names.length
    ? h('ul', { class: 'route-list' }, names.map((n) => h('li', { class: 'mono' }, n)))
    : h('p', { class: 'muted' }, 'No enabled route uses the adaptive strategy.');
}

function killSwitchEmpty(policy) {
  return h('div', { class: 'empty-state', id: 'empty-kill-switch' },
    h('h2', {}, 'Adaptive routing is switched off'),
    h('p', {}, 'The kill switch — ', h('code', {}, '[adaptive_routing] enabled = false'), ', the shipped default — is off, so no gateway is blending. ' +
      'Every route on the adaptive strategy is serving from its pipeline fallback stack (session affinity, static weight, load, prefix affinity). Nothing is wrong with the gateways.'),
    h('h3', {}, `Routes it is holding back (${policy.affectedRoutes.length})`),
    routeList(policy.affectedRoutes),
    h('a', { class: 'btn primary', href: '#/adaptive/settings', id: 'to-settings' }, 'Open Adaptive Routing → Settings'));
}

function silentEmpty(policy, t) {
  if (!policy.affectedRoutes.length) {
    return h('div', { class: 'empty-state', id: 'empty-no-reports' },
      h('h2', {}, 'No gateway is reporting'),
      h('p', {}, 'The kill switch is on, but no enabled route uses the adaptive strategy, so no gateway has anything to report. ' +
        'Put a route on adaptive to see its scores here.'));
  }
  return h('div', { class: 'empty-state', id: 'empty-no-reports' },
    h('h2', {}, 'No gateway is reporting'),
    h('p', {}, `The kill switch is on, yet no gateway has sent a report in the last ${t.freshWindowSecs} s. The gateways are the place to look:`),
    h('ul', {},
      h('li', {}, `Each gateway reports every 15 s; a report older than ${t.freshWindowSecs} s is hidden, so a stopped gateway does not look healthy.`),
      h('li', {}, 'A gateway that cannot name itself is refused by the control plane. It logs ',
        h('code', {}, 'adaptive-routing telemetry report failed'), ' and warns at boot when no node identity could be resolved. Set ',
        h('code', {}, 'ROLTER_NODE_ID'), ' on each gateway to fix it.')),
    h('h3', {}, `Routes expected to report (${policy.affectedRoutes.length})`),
    routeList(policy.affectedRoutes));
}

function render(root, policy, t) {
  const head = h('header', { class: 'screen-head' },
    h('div', {}, h('div', { class: 'crumb' }, 'Adaptive Routing'), h('h1', {}, 'Telemetry'),
      h('p', { class: 'muted' }, 'The current report from every gateway balancing an adaptive route. Current state, not history.')),
    h('div', { class: 'live' }, h('span', { class: 'live-dot' }), t.generatedAt ? 'Generated ' + since(t.generatedAt) : 'Live'));
  if (!t.routes.length) {
    replace(root, head, policy.enabled ? silentEmpty(policy, t) : killSwitchEmpty(policy));
    return;
  }
  replace(root, head,
    policy.enabled ? null : h('div', { class: 'banner warn', id: 'kill-switch-banner' }, 'The kill switch is off: gateways report, but none blends. ',
      h('a', { href: '#/adaptive/settings' }, 'Adaptive Routing → Settings')),
    t.routes.map((r) => {
      const engaged = r.nodes.filter((n) => n.engaged).length;
      return h('section', { class: 'card route-telemetry', 'data-model': r.model },
        h('div', { class: 'editor-head' }, h('h2', {}, r.model),
          engaged ? badge(`Blend active on ${engaged} of ${r.nodes.length} node${r.nodes.length === 1 ? '' : 's'}`, 'ok')
            : badge('Blend not active', 'muted')),
        r.nodes.map((n) => nodeCard(n, policy)));
    }));
}

export function mount(root, ctx) {
  const every = ctx.refreshMs(5000);
  let stopped = false;
  let timer = null;
  replace(root, h('p', { class: 'muted' }, 'Loading telemetry…'));
  async function tick() {
    try {
      const [policy, t] = await Promise.all([api.policy(), api.telemetry()]);
      if (stopped) return;
      render(root, policy, t);
    } catch (e) {
      if (stopped || e.unauthorized) return;
      replace(root, h('div', { class: 'banner bad' }, 'Could not load adaptive routing telemetry: ' + e.message));
    }
    timer = setTimeout(tick, every);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
