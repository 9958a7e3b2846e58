// forms.js — what every management screen shares: labelled fields, the
// confirmation dialog that names what a destructive action removes, the
// shown-once secret panel, and the rules for who may change what (role
// from the session, "managed by rolter.toml" from the entry).

import { h, replace, badge } from './dom.js';

let seq = 0;
/** A unique element id for label/for pairs. */
export function uid(prefix) { seq += 1; return `${prefix}-${seq}`; }

/** A labelled form row: <label for=id>text</label> input [help]. */
export function field(text, input, help) {
  if (!input.id) input.id = uid('f');
  const helpEl = help ? h('div', { class: 'field-help', id: input.id + '-help' }, help) : null;
  if (helpEl) input.setAttribute('aria-describedby', helpEl.id);
  return h('div', { class: 'field' }, h('label', { for: input.id }, text), input, helpEl);
}

export function textInput(attrs) { return h('input', Object.assign({ type: 'text', autocomplete: 'off', spellcheck: 'false' }, attrs)); }

/**
 * The inline error/status line of a form. error(e, fields) shows an
 * ApiError's message (or a text) as the server wrote it; when it starts
 * with a field's name ("api_base: …", adminapi's habit) and fields maps
 * that name to an input, the input is marked invalid and focused.
 */
export function messageLine(id) {
  const el = h('div', { class: 'form-error', role: 'alert', id });
  let marked = [];
  const unmark = () => { for (const i of marked) { i.classList.remove('invalid'); i.removeAttribute('aria-invalid'); } marked = []; };
  return {
    el,
    error(e, fields) {
      unmark();
      const text = typeof e === 'string' ? e : e.message;
      el.className = 'form-error';
      el.textContent = text;
      const m = /^([a-z_]+)(\[\d+\])?[: ]/.exec(text);
      const input = m && fields && fields[m[1]];
      if (input) {
        input.classList.add('invalid');
        input.setAttribute('aria-invalid', 'true');
        input.setAttribute('aria-errormessage', id);
        marked.push(input);
        input.focus();
      }
    },
    ok(text) { unmark(); el.className = 'form-ok'; el.textContent = text; },
    clear() { unmark(); el.textContent = ''; },
  };
}

/**
 * Asks before a destructive action, naming what goes. Resolves true when
 * confirmed. A native <dialog>: Escape cancels, focus starts on Cancel.
 */
export function confirm(title, detail, actionLabel) {
  return new Promise((resolve) => {
    const cancel = h('button', { type: 'button', class: 'btn', id: 'confirm-cancel' }, 'Cancel');
    const ok = h('button', { type: 'button', class: 'btn danger', id: 'confirm-ok' }, actionLabel);
    const dlg = h('dialog', { class: 'confirm', id: 'confirm', 'aria-labelledby': 'confirm-title' },
      h('h2', { id: 'confirm-title' }, title),
      detail ? h('p', { class: 'muted' }, detail) : null,
      h('div', { class: 'actions' }, cancel, ok));
    const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    cancel.addEventListener('click', () => done(false));
    ok.addEventListener('click', () => done(true));
    dlg.addEventListener('cancel', (ev) => { ev.preventDefault(); done(false); });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancel.focus();
  });
}

/** A secret shown once, with a copy button and the warning that goes with it. */
export function secretPanel(what, name, secret, onDone) {
  const value = h('input', { type: 'text', readonly: true, value: secret, class: 'secret-value mono', id: 'secret-value', 'aria-label': `${what} secret` });
  const status = h('span', { class: 'muted small', role: 'status' });
  const copy = h('button', { type: 'button', class: 'btn', id: 'copy-secret', onclick: async () => {
    try {
      await navigator.clipboard.writeText(secret);
    } catch {
      // no clipboard API outside a secure context: copy the selection
      value.select();
      document.execCommand('copy');
    }
    status.textContent = 'Copied.';
  } }, 'Copy');
  const dismiss = h('button', { type: 'button', class: 'btn ghost', id: 'secret-done', onclick: () => { panel.remove(); if (onDone) onDone(); } }, 'I have stored it');
  const panel = h('section', { class: 'card secret', id: 'secret-panel', role: 'region', 'aria-label': 'New secret' },
    h('h2', {}, `${what} ${name} created`),
    h('p', { class: 'secret-warn' }, 'Copy the secret now: it is shown only this once and cannot be read back. Lose it and you must create a new one.'),
    h('div', { class: 'secret-row' }, value, copy, status),
    h('div', { class: 'actions' }, dismiss));
  value.addEventListener('focus', () => value.select());
  return panel;
}

/** The badge on entries rolter.toml owns. */
export function fileBadge() {
  return badge('managed by rolter.toml', 'muted managed-file',
    'Declared in rolter.toml: edit the file and raise its generation. The admin API refuses changes to it.');
}

/**
 * Why the signed-in operator cannot change item, or '' when they can.
 * ctx.role comes from whoami ('' when unknown: the server decides).
 */
export function whyLocked(ctx, item, need = 'admin') {
  if (item && item.readonly) return 'managed by rolter.toml: change it in the file';
  const rank = { viewer: 1, admin: 2, superadmin: 3 };
  if (ctx.role && (rank[ctx.role] || 0) < rank[need]) return `your ${ctx.role} token cannot change this (needs ${need})`;
  return '';
}

/** A button disabled (with the reason as its title) when whyLocked says so. */
export function actionButton(label, attrs, why) {
  return h('button', Object.assign({ type: 'button', class: 'btn' }, attrs, why ? { disabled: true, title: why } : {}), label);
}

/** The banner a viewer sees on every screen. */
export function roleBanner(ctx) {
  if (ctx.role !== 'viewer') return null;
  return h('div', { class: 'banner info', id: 'viewer-banner' },
    `Signed in as ${ctx.name || 'a viewer'} (viewer): you can see everything but change nothing. Changes need an admin token.`);
}

/** Replaces root's content with a card holding form, or removes it (form null). */
export function showIn(slot, form) { replace(slot, form || null); if (form) { const f = form.querySelector('input:not([disabled]),select,textarea'); if (f) f.focus(); } }
