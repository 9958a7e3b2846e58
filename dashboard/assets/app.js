// app.js — sign-in, the page shell and the hash router (#/mesh, #/serving,
// #/routes, #/providers, #/keys, #/tokens, #/adaptive/telemetry,
// #/adaptive/settings, #/audit). Each screen module exports mount(root,
// ctx) returning an unmount function; ctx carries the signed-in role.

import * as api from './api.js';
import { h, replace } from './dom.js';
import * as mesh from './mesh.js';
import * as routes from './routes.js';
import * as serving from './serving.js';
import * as providers from './providers.js';
import * as keys from './keys.js';
import * as tokens from './tokens.js';
import * as telemetry from './telemetry.js';
import * as settings from './settings.js';
import * as audit from './audit.js';

const SCREENS = [
  { path: '/mesh', title: 'Mesh', module: mesh },
  { path: '/serving', title: 'Serving', module: serving },
  { path: '/routes', title: 'Routes & groups', module: routes },
  { path: '/providers', title: 'Providers', module: providers },
  { path: '/keys', title: 'API keys', module: keys },
  { path: '/tokens', title: 'Admin tokens', module: tokens, role: 'superadmin' },
  { path: '/adaptive/telemetry', title: 'Telemetry', group: 'Adaptive Routing', module: telemetry },
  { path: '/adaptive/settings', title: 'Settings', group: 'Adaptive Routing', module: settings },
  { path: '/audit', title: 'Audit log', module: audit },
];

const app = document.getElementById('app');
let unmount = null;
// who is signed in: {name, role}; role '' when the server cannot say
let session = { name: '', role: '' };

/** The refresh period for live screens; ?refresh_ms=N (N ≥ 100) shortens it. */
function refreshMs(def) {
  const v = Number(new URLSearchParams(location.search).get('refresh_ms'));
  return isFinite(v) && v >= 100 ? v : def;
}

function stop() {
  if (unmount) { unmount(); unmount = null; }
}

function signIn(message) {
  stop();
  api.clearToken();
  const input = h('input', { id: 'token', type: 'password', name: 'token', autocomplete: 'current-password',
    placeholder: 'Admin token', required: true, 'aria-label': 'Admin token' });
  const error = h('p', { class: 'form-error', role: 'alert', id: 'signin-error' }, message || '');
  const button = h('button', { type: 'submit', class: 'btn primary', id: 'signin' }, 'Sign in');
  const form = h('form', { class: 'signin-card', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    const tok = input.value.trim();
    if (!tok) { error.textContent = 'Enter the admin token.'; return; }
    button.disabled = true;
    error.textContent = '';
    try {
      await api.checkToken(tok);
      api.setToken(tok);
      await start();
    } catch (e) {
      error.textContent = e.unauthorized || e.forbidden ? 'That token was not accepted by the admin API.' : e.message;
    } finally {
      button.disabled = false;
    }
  } },
  h('div', { class: 'brand brand-lg' }, h('span', { class: 'brand-mark' }), 'rolter'),
  h('h1', {}, 'Sign in'),
  h('p', { class: 'muted' }, 'Use an admin token for this mesh. It is kept for this browser tab only.'),
  h('label', { for: 'token' }, 'Admin token'), input, error, button);
  replace(app, h('div', { class: 'signin' }, form));
  input.focus();
}

/** Learns the token's role, then draws the shell. */
async function start() {
  try {
    session = (await api.whoami()) || { name: '', role: '' };
  } catch (e) {
    if (e.unauthorized) return;
    session = { name: '', role: '' };
  }
  shell();
}

function shell() {
  const nav = h('nav', { class: 'nav' });
  let lastGroup = null;
  for (const sc of SCREENS) {
    if (sc.role === 'superadmin' && session.role && session.role !== 'superadmin') continue;
    if (sc.group && sc.group !== lastGroup) nav.appendChild(h('div', { class: 'nav-group' }, sc.group));
    lastGroup = sc.group || null;
    nav.appendChild(h('a', { href: '#' + sc.path, class: ['nav-link', sc.group && 'nav-sub'], 'data-path': sc.path }, sc.title));
  }
  const main = h('main', { class: 'main', id: 'main' });
  const side = h('aside', { class: 'side' },
    h('div', { class: 'brand' }, h('span', { class: 'brand-mark' }), 'rolter'),
    nav,
    session.role ? h('div', { class: 'whoami', id: 'whoami' }, h('span', { class: 'muted' }, 'Signed in as'),
      h('span', { class: 'strong' }, session.name || '(bootstrap token)'), h('span', { class: 'role-chip' }, session.role)) : null,
    h('button', { class: 'btn ghost signout', id: 'signout', onclick: () => signIn('Signed out.') }, 'Sign out'));
  replace(app, h('div', { class: 'layout' }, side, main));
  route();
}

function route() {
  const main = document.getElementById('main');
  if (!main) return;
  const path = location.hash.replace(/^#/, '') || '/mesh';
  const sc = SCREENS.find((x) => x.path === path) || SCREENS[0];
  for (const a of document.querySelectorAll('.nav-link')) a.classList.toggle('active', a.dataset.path === sc.path);
  document.title = (sc.group ? sc.group + ' → ' : '') + sc.title + ' · rolter';
  stop();
  const root = h('div', { class: 'screen', id: 'screen-' + sc.path.slice(1).replace('/', '-') });
  replace(main, root);
  unmount = sc.module.mount(root, { refreshMs, role: session.role, name: session.name, navigate: (p) => { location.hash = '#' + p; } });
}

api.handleUnauthorized(() => signIn('Your session is no longer accepted; sign in again.'));
window.addEventListener('hashchange', route);
if (api.token()) start(); else signIn();
