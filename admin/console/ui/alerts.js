// Alerts: this node's recent alerts with what became of each webhook delivery, and the
// stored alert records that concern no task (executors lost and back, rate-limit changes).
// Alerts about a task are in its timeline too.
import * as api from './api.js';
import {h, update, table} from './dom.js';
import {show} from './time.js';

// The kinds always offered by the filter; others appear once the store holds them.
const KINDS = ['executor_lost', 'executor_back', 'refused_result'];

export async function render(main) {
  const recent = h('div', {class: 'scroll', id: 'alerts-recent'});
  const stored = h('div', {class: 'scroll', id: 'alerts-stored'});
  // A kind filter with the count of each kind: a flood of one kind cannot hide the others.
  const kind = h('select', {id: 'alerts-kind', 'aria-label': 'Kind of stored record'}, h('option', {value: ''}, 'every kind'));
  kind.addEventListener('change', () => load());
  const counts = h('p', {class: 'muted', id: 'alerts-counts'});
  main.append(h('h1', {}, 'Alerts'),
    h('section', {'aria-labelledby': 'al-recent-h'}, h('h2', {id: 'al-recent-h'}, 'Recent alerts of this node, with webhook delivery'),
      h('p', {class: 'muted'}, 'Kept in memory since this node started (the newest 200). "no webhook": no --alert-webhook is configured.'), recent),
    h('section', {'aria-labelledby': 'al-stored-h'}, h('h2', {id: 'al-stored-h'}, 'Stored records that concern no task'),
      h('label', {}, 'Kind ', kind), counts, stored));
  function offer(c) {
    const chosen = kind.value;
    const names = [...new Set([...KINDS, ...Object.keys(c)])].sort();
    update(kind, h('option', {value: ''}, 'every kind'),
      ...names.map(k => h('option', {value: k}, `${k} (${c[k] || 0})`)));
    kind.value = chosen;
    update(counts, names.filter(k => c[k]).map(k => `${k}: ${c[k]}`).join(' · ') || 'No stored record.');
  }
  async function load() {
    const r = await api.get('alerts', {limit: 100, kind: kind.value, counts: 1});
    offer(r.counts || {});
    update(recent, r.deliveries.length ? table(['At', 'Kind', 'Task', 'Message', 'Delivery', 'Attempts', 'Error'],
      r.deliveries.map(d => h('tr', {dataset: {kind: d.kind, delivery: d.delivery}},
        h('td', {class: 'time'}, show(d.at)), h('td', {}, d.kind),
        h('td', {}, d.task ? h('a', {href: '#/tasks/' + encodeURIComponent(d.task)}, d.task) : '—'),
        h('td', {class: 'pre'}, d.message),
        h('td', {}, h('span', {class: 'delivery delivery-' + d.delivery.replace(/ /g, '-')}, d.delivery)),
        h('td', {class: 'num'}, d.attempts || ''), h('td', {class: 'pre'}, d.error || ''))), {id: 'deliveries-table'})
      : h('p', {class: 'muted', id: 'deliveries-table'}, 'No alert since this node started.'));
    update(stored, r.actions.length ? table(['At', 'Kind', 'Actor', 'Detail'],
      r.actions.map(a => h('tr', {dataset: {action: a.action}}, h('td', {class: 'time'}, show(a.at)), h('td', {}, a.action),
        h('td', {}, a.actor), h('td', {class: 'pre'}, a.detail))), {id: 'stored-alerts-table'})
      : h('p', {class: 'muted', id: 'stored-alerts-table'}, 'None.'));
  }
  await load();
  return {refresh: load};
}
