// Alerts: this node's recent alerts with what became of each webhook delivery, and the
// stored alert records that concern no task (executors lost and back, rate-limit changes).
// Alerts about a task are in its timeline too.
import * as api from './api.js';
import {h, update, table, debounce} from './dom.js';
import {show} from './time.js';

// The kinds always offered by the filter; others appear once the store holds them.
const KINDS = ['executor_lost', 'executor_back', 'refused_result'];

export async function render(main, args) {
  const q = new URLSearchParams(args && args[0] || '');
  const recent = h('div', {class: 'scroll', id: 'alerts-recent'});
  const stored = h('div', {class: 'scroll', id: 'alerts-stored'});
  // A kind filter with the count of each kind: a flood of one kind cannot hide the others.
  const kind = h('select', {id: 'alerts-kind', 'aria-label': 'Kind of stored record'}, h('option', {value: ''}, 'every kind'));
  kind.addEventListener('change', () => load());
  const counts = h('p', {class: 'muted', id: 'alerts-counts'});
  // A task's alerts: the recent ones about it and its stored records (?task=NAME), newest
  // first as the rest; empty: the records that concern no task.
  const task = h('input', {id: 'alerts-task', type: 'search', value: q.get('task') || '', placeholder: 'any task (exact name)', 'aria-label': 'Task'});
  task.addEventListener('input', debounce(() => {
    const name = task.value.trim();
    history.replaceState(null, '', '#/alerts' + (name ? '?task=' + encodeURIComponent(name) : ''));
    load();
  }, 250));
  const storedHead = h('h2', {id: 'al-stored-h'}, 'Stored records that concern no task');
  main.append(h('h1', {}, 'Alerts'), h('div', {class: 'filters'}, h('label', {}, 'Task ', task),
    h('span', {class: 'hint'}, 'Newest first. A task named here narrows both lists to its alerts.')),
    h('section', {'aria-labelledby': 'al-recent-h'}, h('h2', {id: 'al-recent-h'}, 'Recent alerts of this node, with webhook delivery'),
      h('p', {class: 'muted'}, 'Kept in memory since this node started (the newest 200). "no webhook": no --alert-webhook is configured.'), recent),
    h('section', {'aria-labelledby': 'al-stored-h'}, storedHead,
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
    const name = task.value.trim();
    let r;
    try {
      r = await api.get('alerts', {limit: 100, kind: kind.value, counts: 1, task: name});
    } catch (e) {
      if (!(e instanceof api.APIError) || e.status !== 404) throw e;
      update(storedHead, 'Stored records of task ', h('span', {class: 'mono'}, name));
      update(counts, '');
      update(recent, h('p', {class: 'muted', id: 'deliveries-table'}, `No task named ${name}.`));
      update(stored, h('p', {class: 'muted', id: 'stored-alerts-table'}, `No task named ${name}.`));
      return;
    }
    update(storedHead, ...(name ? ['Stored records of task ', h('span', {class: 'mono'}, name)] : ['Stored records that concern no task']));
    offer(r.counts || {});
    const deliveries = name ? r.deliveries.filter(d => d.task === name) : r.deliveries;
    update(recent, deliveries.length ? table(['At', 'Kind', 'Task', 'Message', 'Delivery', 'Attempts', 'Error'],
      deliveries.map(d => h('tr', {dataset: {kind: d.kind, delivery: d.delivery}},
        h('td', {class: 'time'}, show(d.at)), h('td', {}, d.kind),
        h('td', {}, d.task ? h('a', {href: '#/tasks/' + encodeURIComponent(d.task)}, d.task) : '—'),
        h('td', {class: 'pre'}, d.message),
        h('td', {}, h('span', {class: 'delivery delivery-' + d.delivery.replace(/ /g, '-')}, d.delivery)),
        h('td', {class: 'num'}, d.attempts || ''), h('td', {class: 'pre'}, d.error || ''))), {id: 'deliveries-table'})
      : h('p', {class: 'muted', id: 'deliveries-table'}, name ? `No alert about ${name} since this node started.` : 'No alert since this node started.'));
    update(stored, r.actions.length ? table(['At', 'Kind', 'Actor', 'Detail'],
      r.actions.map(a => h('tr', {dataset: {action: a.action, at: String(a.at)}}, h('td', {class: 'time'}, show(a.at)), h('td', {}, a.action),
        h('td', {}, a.actor), h('td', {class: 'pre'}, a.detail))), {id: 'stored-alerts-table'})
      : h('p', {class: 'muted', id: 'stored-alerts-table'}, 'None.'));
  }
  await load();
  return {refresh: load};
}
