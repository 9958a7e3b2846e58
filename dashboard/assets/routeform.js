// routeform.js — the full route / provider-group form: name, strategy,
// discover, max_loras and the target list. Targets are picked from the
// known providers or from engines the mesh discovered that no provider
// points at yet (saving then creates that provider first, named after the
// engine's node id).

import * as api from './api.js';
import { h } from './dom.js';
import { field, textInput, messageLine } from './forms.js';

function normURL(u) { return (u || '').trim().toLowerCase().replace(/\/+$/, '').replace(/\/v1$/, ''); }

/** Engines announced over gossip that no provider's api_base points at. */
function unclaimedEngines(env) {
  const bases = new Set([...env.providers.values()].map((p) => normURL(p.apiBase)));
  return env.engines.filter((e) => e.engineUrl && !bases.has(normURL(e.engineUrl)));
}

function strategySelect(id, held, catalog) {
  const sel = h('select', { id, name: 'strategy' });
  const offered = catalog.offered().map((x) => x.name);
  if (held && !offered.includes(held)) sel.appendChild(h('option', { value: held }, `${held} (current)`));
  for (const n of offered) sel.appendChild(h('option', { value: n }, n));
  sel.value = held || 'round_robin';
  return sel;
}

/**
 * kind is 'route' or 'group'; existing the item being edited (null: new).
 * onSaved(name) runs after the server stored it.
 */
export function routeForm(kind, existing, env, onSaved, onCancel) {
  const isGroup = kind === 'group';
  const editing = !!existing;
  const pfx = isGroup ? 'group' : 'route';
  const item = existing || { model: '', name: '', slug: '', strategy: 'round_robin', targets: [], discover: false, maxLoras: 0 };
  const engines = unclaimedEngines(env);
  const nameIn = textInput({ id: `${pfx}-name`, name: 'name', value: isGroup ? item.name : item.model, required: true, disabled: editing,
    placeholder: isGroup ? 'fleet' : 'llama-3.1-8b' });
  const slugIn = isGroup ? textInput({ id: 'group-slug', name: 'slug', value: item.slug, required: true, placeholder: 'fleet' }) : null;
  const strategy = strategySelect(`${pfx}-strategy`, item.strategy, env.catalog);
  const discover = isGroup ? null : h('input', { type: 'checkbox', id: 'route-discover', name: 'discover', checked: item.discover });
  // enabled only where the admin API has it (env.hasEnabled: some listed
  // route or group carries the flag)
  const enabled = env.hasEnabled ? h('input', { type: 'checkbox', id: `${pfx}-enabled`, name: 'enabled', checked: item.enabled !== false }) : null;
  const maxLoras = h('input', { type: 'number', id: `${pfx}-max-loras`, name: 'max_loras', value: String(item.maxLoras || 0), min: 0, step: 1, class: 'num-input' });
  const rows = h('tbody', { id: `${pfx}-targets` });
  const msg = messageLine(`${pfx}-error`);

  function targetRow(t) {
    const n = rows.children.length + 1;
    const sel = h('select', { class: 'target-provider', 'aria-label': `Target ${n} provider` },
      h('option', { value: '' }, 'Choose a provider…'),
      h('optgroup', { label: 'Providers' }, [...env.providers.keys()].sort().map((p) => h('option', { value: 'p:' + p }, p))),
      engines.length ? h('optgroup', { label: 'Engines in the mesh (creates a provider)' },
        engines.map((e, i) => h('option', { value: 'e:' + i }, `${e.nodeId} · ${e.engineUrl}`))) : null);
    sel.value = t.provider ? 'p:' + t.provider : '';
    const model = textInput({ class: 'target-model', value: t.model || '', 'aria-label': `Target ${n} upstream model`,
      placeholder: isGroup ? 'passthrough' : 'same as the route' });
    const weight = h('input', { type: 'number', class: 'weight target-weight', min: 1, step: 1, value: String(t.weight || 1), 'aria-label': `Target ${n} weight` });
    const remove = h('button', { type: 'button', class: 'btn small ghost remove-target', 'aria-label': `Remove target ${n}` }, 'Remove');
    const tr = h('tr', {}, h('td', {}, sel), h('td', {}, model), h('td', {}, weight), h('td', {}, remove));
    remove.addEventListener('click', () => tr.remove());
    rows.appendChild(tr);
    return sel;
  }
  for (const t of item.targets) targetRow(t);
  if (!item.targets.length && !item.discover) targetRow({});
  const add = h('button', { type: 'button', class: 'btn small', id: `${pfx}-add-target`, onclick: () => targetRow({}).focus() }, 'Add target');

  const save = h('button', { type: 'submit', class: 'btn primary', id: `${pfx}-save` }, editing ? 'Save' : isGroup ? 'Create group' : 'Create route');
  const form = h('form', { class: 'card form-card', id: `${pfx}-form`, novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    msg.clear();
    const targets = [];
    const create = [];
    for (const tr of rows.children) {
      const v = tr.querySelector('.target-provider').value;
      const w = tr.querySelector('.target-weight').value;
      if (!v) { msg.error('Every target needs a provider (or remove the row).'); return; }
      if (w.trim() === '' || !isFinite(Number(w))) { msg.error('Every weight needs a number.'); return; }
      let provider = v.slice(2);
      if (v.startsWith('e:')) {
        const e = engines[Number(provider)];
        provider = e.nodeId;
        const trimmed = e.engineUrl.replace(/\/+$/, '');
        const base = /\/v1$/.test(trimmed) ? trimmed : trimmed + '/v1';
        if (!create.some((c) => c.name === provider)) create.push({ name: provider, apiBase: base, apiKeyEnv: '', priceIn: 0, priceOut: 0 });
      }
      targets.push({ provider, model: tr.querySelector('.target-model').value.trim(), weight: Number(w) });
    }
    const maxL = Number(maxLoras.value || 0);
    if (!isFinite(maxL)) { msg.error('max_loras needs a number.'); return; }
    const obj = { model: nameIn.value.trim(), name: nameIn.value.trim(), slug: slugIn ? slugIn.value.trim() : '',
      strategy: strategy.value, targets, discover: discover ? discover.checked : false, maxLoras: maxL,
      enabled: enabled ? enabled.checked : null };
    save.disabled = true;
    try {
      for (const p of create) await api.createProvider(p);
      if (isGroup) await (editing ? api.updateGroup(obj, item.raw) : api.createGroup(obj));
      else await (editing ? api.updateRoute(obj, item.raw) : api.createRoute(obj));
      onSaved(obj.name);
    } catch (e) {
      if (!e.unauthorized) {
        msg.error(e, { model: nameIn, name: nameIn, slug: slugIn, strategy, max_loras: maxLoras,
          targets: rows.querySelector('select'), members: rows.querySelector('select') });
      }
    } finally {
      save.disabled = false;
    }
  } },
  h('h2', {}, editing ? `Edit ${isGroup ? 'provider group' : 'route'} ${isGroup ? item.name : item.model}` : isGroup ? 'New provider group' : 'New route'),
  h('div', { class: 'form-grid' },
    field(isGroup ? 'Name' : 'Public model name', nameIn, isGroup ? 'Addresses the group in the admin API.' : 'What clients send as "model".'),
    isGroup ? field('Slug', slugIn, 'Clients address the group as slug/model.') : null,
    field('Strategy', strategy),
    enabled ? h('div', { class: 'field check' }, h('div', { class: 'check-row' }, enabled, h('label', { for: `${pfx}-enabled` }, 'Enabled')),
      h('div', { class: 'field-help' }, isGroup ? 'A disabled group answers 404 to slug/… until enabled again.' : 'A disabled route answers 404 until enabled again; its settings are kept.')) : null,
    h('div', { class: 'field-pair' },
      field('max_loras', maxLoras, 'lora_aware\'s adapter set per target; 0 = the default (1).'),
      discover ? h('div', { class: 'field check' }, h('div', { class: 'check-row' }, discover, h('label', { for: 'route-discover' }, 'Discover targets from the mesh')),
        h('div', { class: 'field-help' }, 'Every engine whose sidecar announces this model becomes a target.')) : null)),
  h('h3', {}, isGroup ? 'Members' : 'Targets'),
  h('div', { class: 'table-wrap' }, h('table', { class: 'table compact targets-edit' },
    h('thead', {}, h('tr', {}, ['Provider', 'Upstream model', 'Weight', ''].map((c) => h('th', {}, c)))), rows)),
  h('div', { class: 'actions add-row' }, add),
  msg.el,
  h('div', { class: 'actions' }, h('button', { type: 'button', class: 'btn ghost', id: `${pfx}-cancel`, onclick: onCancel }, 'Cancel'), save));
  return form;
}
