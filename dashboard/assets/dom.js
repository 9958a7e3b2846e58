// dom.js — tiny helpers for building DOM without innerHTML (so nothing an
// API returns is ever parsed as markup) and for formatting numbers.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k === 'text') el.textContent = v;
    else if (k === 'style') Object.assign(el.style, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'selected') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** h('div', {class: 'x'}, child, …) creates an HTML element. */
export function h(tag, attrs, ...children) { return build(document.createElement(tag), attrs, children); }

/** s('rect', {...}) creates an SVG element. */
export function s(tag, attrs, ...children) { return build(document.createElementNS(SVG_NS, tag), attrs, children); }

export function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

export function replace(el, ...children) { clear(el); append(el, children); return el; }

/** A short human age: "0.4 s", "12 s", "3 min", "2 h". */
export function age(ms) {
  if (ms === null || ms === undefined || !isFinite(ms)) return '—';
  if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
  if (ms < 120000) return Math.round(ms / 1000) + ' s';
  if (ms < 7200000) return Math.round(ms / 60000) + ' min';
  return Math.round(ms / 3600000) + ' h';
}

/** Age of an RFC 3339 timestamp relative to now. */
export function since(ts) {
  const t = Date.parse(ts);
  return isNaN(t) ? '—' : age(Math.max(0, Date.now() - t)) + ' ago';
}

export function pct(v, digits = 0) {
  return v === null || v === undefined || !isFinite(v) ? '—' : (v * 100).toFixed(digits) + '%';
}

export function fixed(v, digits = 2) {
  return v === null || v === undefined || !isFinite(v) ? '—' : Number(v).toFixed(digits);
}

export function int(v) {
  return v === null || v === undefined || !isFinite(v) ? '—' : Math.round(v).toLocaleString('en-US');
}

export function when(ts) {
  const t = new Date(ts);
  if (isNaN(t.getTime())) return ts || '—';
  return t.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/** A horizontal meter for a 0..1 value. */
export function meter(v, cls) {
  const w = v === null || v === undefined || !isFinite(v) ? 0 : Math.max(0, Math.min(1, v));
  return h('span', { class: ['meter', cls] }, h('span', { class: 'meter-fill', style: { width: (w * 100).toFixed(1) + '%' } }));
}

export function badge(text, cls, title) { return h('span', { class: ['badge', cls], title }, text); }
