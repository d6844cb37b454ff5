// DOM helpers. Everything shown from the server goes through text nodes (textContent); the
// console never assigns innerHTML, so a task name or an error message full of markup is
// shown as the characters it is.

// h builds an element: h('td', {class: 'x', onclick: fn}, 'text', child, ...).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
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
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
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
