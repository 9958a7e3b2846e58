// providers.js — the Providers screen: every upstream endpoint the routes
// and groups target, created, edited and deleted here. Validation is the
// server's (api_base against [limits], prices ≥ 0): its message is shown
// inline and nothing is stored.

import * as api from './api.js';
import { h, replace, fixed } from './dom.js';
import { field, textInput, messageLine, confirm, fileBadge, whyLocked, actionButton, roleBanner, showIn } from './forms.js';

function providerForm(existing, onSaved, onCancel) {
  const editing = !!existing;
  const p = existing || { name: '', apiBase: '', apiKeyEnv: '', priceIn: 0, priceOut: 0 };
  const name = textInput({ id: 'provider-name', name: 'name', value: p.name, required: true, disabled: editing });
  const base = textInput({ id: 'provider-api-base', name: 'api_base', value: p.apiBase, required: true, placeholder: 'scheme://host:port/v1' });
  const keyEnv = textInput({ id: 'provider-key-env', name: 'api_key_env', value: p.apiKeyEnv, placeholder: 'OPENAI_API_KEY' });
  const priceIn = h('input', { type: 'number', id: 'provider-price-in', name: 'price_in', value: String(p.priceIn), step: 'any', min: 0, class: 'num-input' });
  const priceOut = h('input', { type: 'number', id: 'provider-price-out', name: 'price_out', value: String(p.priceOut), step: 'any', min: 0, class: 'num-input' });
  const msg = messageLine('provider-error');
  const save = h('button', { type: 'submit', class: 'btn primary', id: 'provider-save' }, editing ? 'Save provider' : 'Create provider');
  const cancel = h('button', { type: 'button', class: 'btn ghost', id: 'provider-cancel', onclick: onCancel }, 'Cancel');
  const form = h('form', { class: 'card form-card', id: 'provider-form', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    msg.clear();
    const body = { name: name.value.trim(), apiBase: base.value.trim(), apiKeyEnv: keyEnv.value.trim(),
      priceIn: Number(priceIn.value || 0), priceOut: Number(priceOut.value || 0) };
    if (!isFinite(body.priceIn) || !isFinite(body.priceOut)) { msg.error('Prices need a number.'); return; }
    save.disabled = true;
    try {
      await (editing ? api.updateProvider(body) : api.createProvider(body));
      onSaved(body.name);
    } catch (e) {
      if (!e.unauthorized) msg.error(e, { name, api_base: base, api_key_env: keyEnv, price_in_per_mtok: priceIn, price_out_per_mtok: priceOut });
    } finally {
      save.disabled = false;
    }
  } },
  h('h2', {}, editing ? `Edit provider ${p.name}` : 'New provider'),
  h('div', { class: 'form-grid' },
    field('Name', name, editing ? 'A provider is renamed by creating a new one.' : 'Routes and groups name it as their target.'),
    field('API base', base, 'The engine\'s OpenAI-compatible base URL; the scheme and host must be allowed by [limits].'),
    field('API key environment variable', keyEnv, 'Optional: every router reads the upstream key from this variable.'),
    h('div', { class: 'field-pair' },
      field('Price in ($/Mtok)', priceIn), field('Price out ($/Mtok)', priceOut))),
  msg.el,
  h('div', { class: 'actions' }, cancel, save));
  return form;
}

export function mount(root, ctx) {
  let stopped = false;
  const slot = h('div', { id: 'provider-form-slot' });
  const page = messageLine('providers-msg');
  const body = h('div');
  const newBtn = actionButton('New provider', { class: 'btn primary', id: 'new-provider' }, whyLocked(ctx, null));

  async function load(flash) {
    let list;
    try {
      list = await api.providers();
    } catch (e) {
      if (!stopped && !e.unauthorized) replace(body, h('div', { class: 'banner bad' }, 'Could not load providers: ' + e.message));
      return;
    }
    if (stopped) return;
    if (flash) page.ok(flash); else page.clear();
    if (!list.length) { replace(body, h('p', { class: 'empty', id: 'providers-empty' }, 'No providers yet. Create one, then a route over it.')); return; }
    replace(body, h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'providers' },
      h('thead', {}, h('tr', {}, ['Name', 'API base', 'Key env', 'Price in / out ($/Mtok)', '', ''].map((c) => h('th', {}, c)))),
      h('tbody', {}, list.map((p) => {
        const why = whyLocked(ctx, p);
        return h('tr', { 'data-name': p.name },
          h('td', { class: 'strong' }, p.name),
          h('td', { class: 'mono small wrap' }, p.apiBase),
          h('td', { class: 'mono small' }, p.apiKeyEnv || h('span', { class: 'muted' }, '—')),
          h('td', { class: 'num' }, `${fixed(p.priceIn)} / ${fixed(p.priceOut)}`),
          h('td', {}, p.readonly ? fileBadge() : null),
          h('td', { class: 'row-actions' },
            actionButton('Edit', { class: 'btn small edit', 'aria-label': `Edit provider ${p.name}`, onclick: () => showIn(slot, providerForm(p, done, () => showIn(slot, null))) }, why),
            actionButton('Delete', { class: 'btn small danger-ghost delete', 'aria-label': `Delete provider ${p.name}`, onclick: async () => {
              if (!await confirm(`Delete provider ${p.name}?`, `Routes and groups can no longer target ${p.name} (${p.apiBase}). The server refuses while one still does.`, `Delete ${p.name}`)) return;
              try {
                await api.deleteProvider(p.name);
                load(`Deleted provider ${p.name}.`);
              } catch (e) {
                if (!e.unauthorized) page.error(e);
              }
            } }, why)));
      })))));
  }
  function done(name) { showIn(slot, null); load(`Saved provider ${name}. Every router applies it with the next config version.`); }
  newBtn.addEventListener('click', () => showIn(slot, providerForm(null, done, () => showIn(slot, null))));

  replace(root,
    h('header', { class: 'screen-head' },
      h('div', {}, h('h1', {}, 'Providers'), h('p', { class: 'muted' }, 'The upstream endpoints routes and provider groups send traffic to.')),
      newBtn),
    roleBanner(ctx), slot, page.el, h('section', { class: 'card' }, body));
  load();
  return () => { stopped = true; };
}
