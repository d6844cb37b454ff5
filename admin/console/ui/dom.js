// DOM helpers. Everything shown from the server goes through text nodes (textContent); the
// console never assigns innerHTML, so a task name or an error message full of markup is
// shown as the characters it is.

// h builds an element: h('td', {class: 'x', onclick: fn}, 'text', child, ...).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') listen(el, k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// listen attaches a handler through a table on the element, so that update can give a kept
// element the handler of its replacement (a pager's button closes over the next cursor).
function listen(el, type, fn) {
  if (!el.axeOn) el.axeOn = {};
  if (!el.axeOn[type]) el.addEventListener(type, ev => el.axeOn[type](ev));
  el.axeOn[type] = fn;
}

// svg builds an SVG element with attributes.
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  append(el, children);
  return el;
}

// replace swaps el's children for the given ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// update makes el's children look like the given ones while keeping every node that did not
// change: a refresh that brings the same text leaves its text nodes alone, so a selection
// (a ticket, a traceback being copied) survives, and a focused input keeps its value and
// caret. Children are matched by data-key, data-ticket or data-task when they have one, else
// by position and tag.
export function update(el, ...children) {
  const next = document.createElement(el.tagName === 'svg' ? 'div' : el.tagName);
  append(next, children);
  morphChildren(el, next);
  return el;
}

function keyOf(n) {
  if (n.nodeType !== 1 || !n.dataset) return '';
  const d = n.dataset;
  return d.key ? 'k:' + d.key : d.ticket ? 't:' + d.ticket : d.task ? 'n:' + d.task : '';
}

function sameKind(a, b) {
  return a.nodeType === b.nodeType && a.nodeName === b.nodeName && keyOf(a) === keyOf(b) &&
    (a.nodeName !== 'INPUT' || a.type === b.type);
}

function morphChildren(old, next) {
  const keyed = new Map();
  for (const c of old.childNodes) { const k = keyOf(c); if (k) keyed.set(k, c); }
  let at = old.firstChild;
  for (const n of [...next.childNodes]) {
    const k = keyOf(n);
    let match = null;
    if (k) match = keyed.get(k) || null;
    else if (at && !keyOf(at) && sameKind(at, n)) match = at;
    if (match && sameKind(match, n)) {
      if (match !== at) old.insertBefore(match, at);
      else at = at.nextSibling;
      if (k) keyed.delete(k);
      morph(match, n);
    } else {
      old.insertBefore(n, at);
    }
  }
  while (at) { const nx = at.nextSibling; at.remove(); at = nx; }
}

function morph(old, next) {
  if (old.nodeType === 3 || old.nodeType === 8) {
    if (old.nodeValue !== next.nodeValue) old.nodeValue = next.nodeValue;
    return;
  }
  for (const a of [...old.attributes]) if (!next.hasAttribute(a.name)) old.removeAttribute(a.name);
  for (const a of next.attributes) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
  if (next.axeOn) {
    for (const [type, fn] of Object.entries(next.axeOn)) listen(old, type, fn);
  }
  const field = old.nodeName === 'INPUT' || old.nodeName === 'SELECT' || old.nodeName === 'TEXTAREA';
  if (!field || old.nodeName === 'SELECT') morphChildren(old, next);
  // What the user is typing or has ticked is theirs until they leave the field.
  if (field && old !== document.activeElement) {
    if (old.value !== next.value) old.value = next.value;
    if (old.nodeName === 'INPUT' && old.checked !== next.checked) old.checked = next.checked;
  }
}

// table builds a table from column headings and rows of cells.
export function table(cols, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, cols.map(c => (c instanceof Node ? h('th', {scope: 'col'}, c) : h('th', {scope: 'col'}, c))))),
    h('tbody', {}, rows));
}

// toast shows a short message in the live region.
export function toast(msg, kind) {
  const t = h('div', {class: 'toast ' + (kind || '')}, msg);
  document.getElementById('toasts').appendChild(t);
  // A toast with a link (a new run's ticket) stays long enough to be clicked.
  setTimeout(() => t.remove(), kind === 'error' || t.querySelector('a') ? 8000 : 4000);
}

// confirmAction asks before a destructive action; resolves true on Confirm.
export async function confirmAction(text, okLabel) {
  return (await confirmWithNote(text, okLabel, null)).ok;
}

// confirmWithNote asks before an action and takes a note (a pause's why, a kill's reason)
// in the same dialog: resolves {ok, note}. noteLabel null shows no note box.
export function confirmWithNote(text, okLabel, noteLabel) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel || 'Confirm';
  const label = document.getElementById('confirm-note-label');
  const input = document.getElementById('confirm-note');
  label.hidden = noteLabel === null || noteLabel === undefined;
  document.getElementById('confirm-note-name').textContent = noteLabel || 'Note';
  input.value = '';
  return new Promise(resolve => {
    d.addEventListener('close', () => resolve({ok: d.returnValue === 'ok', note: input.value.trim()}), {once: true});
    d.returnValue = '';
    d.showModal();
    (label.hidden ? document.getElementById('confirm-cancel') : input).focus();
  });
}

// debounce delays fn until calls stop for ms.
export function debounce(fn, ms) {
  let t;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}
