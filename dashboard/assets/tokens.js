// tokens.js — Admin tokens (superadmin only): who may use the admin API
// and this dashboard, with which role. A new token's secret is shown once.

import * as api from './api.js';
import { h, replace, badge } from './dom.js';
import { field, textInput, messageLine, confirm, whyLocked, actionButton, secretPanel, showIn } from './forms.js';

const ROLES = [
  ['viewer', 'viewer — sees everything, changes nothing'],
  ['admin', 'admin — manages providers, routes, groups and keys'],
  ['superadmin', 'superadmin — also admin tokens and the adaptive policy'],
];

function tokenForm(onCreated, onCancel) {
  const name = textInput({ id: 'token-name', name: 'name', required: true, placeholder: 'ops-oncall' });
  const role = h('select', { id: 'token-role', name: 'role' }, ROLES.map(([v, label]) => h('option', { value: v }, label)));
  const msg = messageLine('token-error');
  const save = h('button', { type: 'submit', class: 'btn primary', id: 'token-save' }, 'Create token');
  return h('form', { class: 'card form-card', id: 'token-form', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    msg.clear();
    save.disabled = true;
    try {
      onCreated(await api.createToken(name.value.trim(), role.value));
    } catch (e) {
      if (!e.unauthorized) msg.error(e);
    } finally {
      save.disabled = false;
    }
  } },
  h('h2', {}, 'New admin token'),
  h('div', { class: 'form-grid' }, field('Name', name, 'Recorded as the actor of every change made with it.'), field('Role', role)),
  msg.el,
  h('div', { class: 'actions' }, h('button', { type: 'button', class: 'btn ghost', id: 'token-cancel', onclick: onCancel }, 'Cancel'), save));
}

export function mount(root, ctx) {
  let stopped = false;
  const slot = h('div');
  const secretSlot = h('div');
  const page = messageLine('tokens-msg');
  const body = h('div');
  const locked = whyLocked(ctx, null, 'superadmin');
  const newBtn = actionButton('New admin token', { class: 'btn primary', id: 'new-token' }, locked);

  async function load(flash) {
    let list;
    try {
      list = await api.tokens();
    } catch (e) {
      if (stopped || e.unauthorized) return;
      replace(body, h('div', { class: ['banner', e.forbidden ? 'warn' : 'bad'], id: 'tokens-forbidden' },
        e.forbidden ? 'Admin tokens are for superadmins: ' + e.message : 'Could not load admin tokens: ' + e.message));
      return;
    }
    if (stopped) return;
    if (flash) page.ok(flash); else page.clear();
    replace(body, h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'tokens' },
      h('thead', {}, h('tr', {}, ['Name', 'Role', '', ''].map((c) => h('th', {}, c)))),
      h('tbody', {}, list.map((t) => {
        // a read-only token is the bootstrap superadmin (ROLTER_ADMIN_TOKEN)
        const why = t.readonly ? 'the bootstrap token is set by ROLTER_ADMIN_TOKEN or --admin-token-file, not here' : whyLocked(ctx, t, 'superadmin');
        return h('tr', { 'data-name': t.name },
          h('td', { class: 'strong' }, t.name || h('span', { class: 'muted' }, '(bootstrap)')),
          h('td', {}, badge(t.role, t.role === 'superadmin' ? 'primary' : t.role === 'admin' ? 'neutral' : 'muted')),
          h('td', {}, t.readonly ? badge('bootstrap token', 'muted', 'set by ROLTER_ADMIN_TOKEN or --admin-token-file; it cannot be deleted here') : null),
          h('td', { class: 'row-actions' },
            actionButton('Delete', { class: 'btn small danger-ghost delete', 'aria-label': `Delete admin token ${t.name}`, onclick: async () => {
              if (!await confirm(`Delete admin token ${t.name}?`, `Whoever holds ${t.name} (${t.role}) loses access to the admin API and this dashboard at once.`, `Delete ${t.name}`)) return;
              try {
                await api.deleteToken(t.name);
                load(`Deleted admin token ${t.name}.`);
              } catch (e) {
                if (!e.unauthorized) page.error(e);
              }
            } }, why)));
      })))));
  }
  newBtn.addEventListener('click', () => showIn(slot, tokenForm((t) => {
    showIn(slot, null);
    replace(secretSlot, secretPanel('Admin token', t.name, t.secret, () => replace(secretSlot)));
    secretSlot.querySelector('#copy-secret').focus();
    load();
  }, () => showIn(slot, null))));

  replace(root,
    h('header', { class: 'screen-head' },
      h('div', {}, h('h1', {}, 'Admin tokens'), h('p', { class: 'muted' }, 'Who may use the admin API and this dashboard, and with which role.')),
      newBtn),
    secretSlot, slot, page.el, h('section', { class: 'card' }, body));
  load();
  return () => { stopped = true; };
}
