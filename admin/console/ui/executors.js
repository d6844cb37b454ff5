// Executors: every registered instance, alive or lost, with its runs in flight.
import * as api from './api.js';
import {h, update, table} from './dom.js';
import {show, ago} from './time.js';

export async function render(main) {
  const box = h('div', {class: 'scroll', id: 'executors'});
  const sum = h('p', {class: 'muted', id: 'executors-summary'});
  main.append(h('h1', {}, 'Executors'), sum, box,
    h('p', {class: 'muted'}, 'An executor is lost when it has not sent a heartbeat for the lost-after period; it gets no new runs until it is heard from again. One that left deregistered as it stopped: it finishes its runs and gets no new one.'));
  async function load() {
    const r = await api.get('executors');
    const now = Date.now();
    const lost = r.executors.filter(x => x.status === 'lost').length;
    const left = r.executors.filter(x => x.status === 'left').length;
    update(sum, `${r.count - lost - left} alive, ${lost} lost.` + (left ? ` ${left} left (deregistered, draining).` : ''));
    update(box, table(['App', 'Address', 'Handlers', 'Last heartbeat', 'Status', 'Runs in flight'],
      r.executors.map(x => h('tr', {dataset: {app: x.app, address: x.address, status: x.status}},
        h('td', {}, x.app), h('td', {class: 'mono'}, x.address), h('td', {}, (x.handlers || []).join(', ')),
        h('td', {class: 'time'}, show(x.last_heartbeat), h('small', {class: 'muted'}, ' (' + ago(x.last_heartbeat, now) + ')')),
        h('td', {}, h('span', {class: 'state ' + (x.status === 'lost' ? 'state-failed' : x.status === 'left' ? 'state-paused' : 'state-success')}, x.status)),
        h('td', {class: 'num'}, x.inflight ?? 0))), {id: 'executors-table'}));
    if (!r.count) update(box, h('p', {class: 'muted'}, 'No executor has registered.'));
  }
  await load();
  return {refresh: load};
}
