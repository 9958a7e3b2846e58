// settings.js — Adaptive Routing → Settings: the deployment-wide policy.
// Weights show each one's share of the total beside the raw number (only
// the ratio matters), exploration is edited as a percent and sent as a
// fraction, and the server's validation message is shown as it comes.

import * as api from './api.js';
import { h, replace, pct, when } from './dom.js';

const WEIGHTS = [
  { key: 'latencyWeight', id: 'latency_weight', label: 'Latency', help: 'observed latency — how strongly it pulls traffic' },
  { key: 'costWeight', id: 'cost_weight', label: 'Cost', help: 'per-token cost — how strongly it pulls traffic' },
  { key: 'loadWeight', id: 'load_weight', label: 'Load', help: 'in-flight load — how strongly it pushes traffic away' },
];

function numberInput(id, value, attrs) {
  return h('input', Object.assign({ id, name: id, type: 'number', value: String(value), class: 'num-input' }, attrs));
}

function render(root, stored) {
  const enabled = h('input', { type: 'checkbox', id: 'enabled', class: 'switch-input', checked: stored.enabled, role: 'switch' });
  const inputs = {};
  for (const w of WEIGHTS) inputs[w.key] = numberInput(w.id, stored[w.key], { min: 0, max: 100, step: 'any' });
  // exploration is edited as a percent: 5 for 0.05, capped at 50
  const explore = numberInput('exploration_pct', +(stored.explorationRatio * 100).toFixed(4), { min: 0, max: 50, step: 'any' });
  const minSamples = numberInput('min_samples', stored.minSamples, { min: 0, max: 1000000, step: 1 });
  const error = h('div', { class: 'form-error', id: 'policy-error', role: 'alert' });
  const ok = h('div', { class: 'form-ok', id: 'policy-ok', role: 'status' });
  const shares = {};
  for (const w of WEIGHTS) shares[w.key] = h('span', { class: 'share-value', id: w.id + '_share' });
  const stack = h('div', { class: 'stack' });
  const switchNote = h('div', { class: 'switch-note', id: 'affected-routes' });
  const save = h('button', { type: 'submit', class: 'btn primary', id: 'save-policy' }, 'Save policy');
  const reset = h('button', { type: 'button', class: 'btn ghost', id: 'reset-policy' }, 'Reset');

  function update() {
    const vals = WEIGHTS.map((w) => Number(inputs[w.key].value));
    const total = vals.reduce((a, v) => a + (isFinite(v) && v > 0 ? v : 0), 0);
    replace(stack);
    WEIGHTS.forEach((w, i) => {
      const share = total > 0 && vals[i] > 0 ? vals[i] / total : 0;
      shares[w.key].textContent = total > 0 ? pct(share) + ' of total' : '—';
      if (share > 0) stack.appendChild(h('span', { class: 'stack-seg w-' + w.id, style: { width: (share * 100).toFixed(2) + '%' }, title: `${w.label} ${pct(share)}` }));
    });
    const routes = stored.affectedRoutes;
    let lead;
    if (stored.enabled && !enabled.checked) lead = 'Saving switches these routes back to their pipeline fallback stack (session affinity, static weight, load, prefix affinity):';
    else if (!stored.enabled && enabled.checked) lead = 'Saving lets the blend engage on these routes:';
    else if (enabled.checked) lead = 'The blend governs these routes:';
    else lead = 'Held back on their pipeline fallback stack:';
    replace(switchNote,
      h('div', { class: 'switch-lead' }, routes.length ? lead : 'No enabled route uses the adaptive strategy.'),
      routes.length ? h('ul', { class: 'route-list' }, routes.map((r) => h('li', { class: 'mono' }, r))) : null);
    switchNote.classList.toggle('changing', enabled.checked !== stored.enabled);
  }

  function read() {
    const fields = [...WEIGHTS.map((w) => [w.id, inputs[w.key]]), ['exploration', explore], ['min_samples', minSamples]];
    for (const [name, inp] of fields) {
      if (inp.value.trim() === '' || !isFinite(Number(inp.value))) throw new Error(`${name} needs a number.`);
    }
    return {
      enabled: enabled.checked,
      latencyWeight: Number(inputs.latencyWeight.value),
      costWeight: Number(inputs.costWeight.value),
      loadWeight: Number(inputs.loadWeight.value),
      explorationRatio: Number((Number(explore.value) / 100).toFixed(6)),
      minSamples: Number(minSamples.value),
    };
  }

  const form = h('form', { class: 'policy-form', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    ok.textContent = '';
    let p;
    try { p = read(); } catch (e) { error.textContent = e.message; return; }
    save.disabled = true;
    try {
      const saved = await api.savePolicy(p);
      render(root, saved);
      document.getElementById('policy-ok').textContent = 'Saved. The new config version reaches every router without a restart.';
    } catch (e) {
      if (e.unauthorized) return;
      error.textContent = e.message;
      // mark the field the server's message names
      const named = { latency_weight: inputs.latencyWeight, cost_weight: inputs.costWeight, load_weight: inputs.loadWeight,
        exploration_ratio: explore, min_samples: minSamples };
      for (const [field, inp] of Object.entries(named)) inp.classList.toggle('invalid', e.message.startsWith(field));
      save.disabled = false;
    }
  } },
  h('section', { class: 'card' },
    h('h2', {}, 'Kill switch'),
    h('div', { class: 'switch-row' },
      h('label', { class: 'switch', for: 'enabled' }, enabled, h('span', { class: 'switch-track' }, h('span', { class: 'switch-thumb' })),
        h('span', { class: 'switch-text' }, h('span', { class: 'strong' }, 'Adaptive routing'),
          h('span', { class: 'muted small' }, 'enabled = false stops the blend; routes on adaptive serve from their pipeline fallback stack (session affinity, static weight, load, prefix affinity), which keeps learning while the blend runs.'))),
      switchNote)),
  h('section', { class: 'card' },
    h('h2', {}, 'Blend weights'),
    h('p', { class: 'muted' }, 'Each signal is scored in [0, 1] and combined as a weighted sum. Only the ratio between the weights matters; each is bounded to 0–100 and at least one must be positive.'),
    h('div', { class: 'weights' }, WEIGHTS.map((w) => h('div', { class: 'weight-row' },
      h('label', { for: w.id }, h('span', { class: 'strong' }, w.label), h('span', { class: 'muted small' }, w.help)),
      inputs[w.key], h('span', { class: 'swatch w-' + w.id }), shares[w.key]))),
    stack),
  h('section', { class: 'card' },
    h('h2', {}, 'Exploration and warm-up'),
    h('div', { class: 'weights' },
      h('div', { class: 'weight-row' },
        h('label', { for: 'exploration_pct' }, h('span', { class: 'strong' }, 'Exploration'),
          h('span', { class: 'muted small' }, 'share of picks sent off the best target so rivals\' scores stay fresh; at most 50%')),
        h('span', { class: 'suffixed' }, explore, h('span', { class: 'suffix' }, '%')), h('span'), h('span')),
      h('div', { class: 'weight-row' },
        h('label', { for: 'min_samples' }, h('span', { class: 'strong' }, 'Minimum samples'),
          h('span', { class: 'muted small' }, 'requests a route must serve, across its targets, before the blend engages')),
        minSamples, h('span'), h('span')))),
  h('div', { class: 'form-foot' }, h('div', {}, error, ok), h('div', { class: 'actions' }, reset, save)));

  reset.addEventListener('click', () => render(root, stored));
  enabled.addEventListener('change', update);
  for (const inp of Object.values(inputs)) inp.addEventListener('input', update);

  replace(root,
    h('header', { class: 'screen-head' },
      h('div', {}, h('div', { class: 'crumb' }, 'Adaptive Routing'), h('h1', {}, 'Settings'),
        h('p', { class: 'muted' }, 'One deployment-wide policy governs every route on the adaptive strategy.')),
      h('div', { class: 'muted small', id: 'updated-at' }, stored.updatedAt ? 'Last updated ' + when(stored.updatedAt) : '')),
    form);
  update();
}

export function mount(root) {
  let stopped = false;
  replace(root, h('p', { class: 'muted' }, 'Loading the policy…'));
  api.policy().then((p) => { if (!stopped) render(root, p); }, (e) => {
    if (!stopped && !e.unauthorized) replace(root, h('div', { class: 'banner bad' }, 'Could not load the policy: ' + e.message));
  });
  return () => { stopped = true; };
}
