// Rate limits: the global bucket, the default per downstream, and each downstream's own,
// with an edit form (PUT /api/v1/ratelimits). Rate 0 removes a limit.
import * as api from './api.js';
import {h, update, table, toast, confirmAction} from './dom.js';

const fmt = l => (l.Rate > 0 ? `${l.Rate}/s, burst ${l.Burst}` : 'unlimited');

export async function render(main) {
  const box = h('div', {class: 'scroll', id: 'ratelimits'});
  const downstream = h('input', {id: 'rl-downstream', type: 'text', placeholder: 'empty: the global bucket', autocomplete: 'off', 'aria-label': 'Downstream'});
  const rate = h('input', {id: 'rl-rate', type: 'number', min: 0, step: 'any', 'aria-label': 'Rate per second'});
  const burst = h('input', {id: 'rl-burst', type: 'number', min: 0, 'aria-label': 'Burst'});
  const err = h('p', {class: 'error', id: 'rl-error', role: 'alert'});
  const form = h('form', {id: 'rl-form', class: 'filters needs-write', onsubmit: save},
    h('label', {}, 'Downstream ', downstream), h('label', {}, 'Rate (per s) ', rate), h('label', {}, 'Burst ', burst),
    h('button', {type: 'submit', id: 'rl-save'}, 'Set'),
    h('span', {class: 'hint'}, 'A downstream is an executor app or a callback host[:port]. Rate 0 removes its own limit (the default applies); burst empty: the rate, at least 1.'),
    err);
  main.append(h('h1', {}, 'Rate limits'), box, h('h2', {}, 'Set a limit'), form);

  async function put(body) {
    await api.call('PUT', 'ratelimits', body);
    toast(`Rate limit of ${body.downstream || 'the global bucket'} set`);
    await load();
  }

  async function save(ev) {
    ev.preventDefault();
    err.textContent = '';
    const body = {downstream: downstream.value.trim(), rate: Number(rate.value || 0)};
    if (burst.value !== '') body.burst = Number(burst.value);
    try { await put(body); } catch (e) { err.textContent = e.message; }
  }

  function edit(key, l) {
    downstream.value = key;
    rate.value = String(l.Rate || 0);
    burst.value = l.Rate > 0 ? String(l.Burst) : '';
    rate.focus();
  }

  async function load() {
    const r = await api.get('ratelimits');
    const rows = [['', 'global', r.global], ...Object.entries(r.downstreams || {}).sort(([a], [b]) => a.localeCompare(b)).map(([k, l]) => [k, k, l])];
    update(box, table(['Bucket', 'Limit', h('span', {class: 'needs-write'}, 'Actions')], [
      ...rows.map(([key, label, l]) => h('tr', {dataset: {downstream: key || 'global'}},
        h('td', {class: key ? 'mono' : ''}, label), h('td', {}, fmt(l)),
        h('td', {class: 'needs-write'}, h('button', {type: 'button', class: 'rl-edit', onclick: () => edit(key, l)}, 'Edit'), ' ',
          key ? h('button', {type: 'button', class: 'rl-remove danger', onclick: async () => {
            if (!await confirmAction(`Remove the limit of ${key}? The default applies to it then.`, 'Remove')) return;
            try { await put({downstream: key, rate: 0}); } catch (e) { toast(e.message, 'error'); }
          }}, 'Remove') : ''))),
      h('tr', {dataset: {downstream: 'default'}}, h('td', {}, 'default, per downstream'), h('td', {}, fmt(r.default)),
        h('td', {class: 'muted needs-write'}, 'set by --rate-default')),
    ], {id: 'ratelimits-table'}));
  }
  await load();
  return {refresh: load};
}
