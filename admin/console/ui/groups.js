// Groups: task counts by state, with pause and resume of a whole group.
import * as api from './api.js';
import {h, replace, table, toast, confirmAction} from './dom.js';
import {STATES, stateBadge} from './tasks.js';

export async function render(main) {
  const box = h('div', {class: 'scroll', id: 'groups'});
  main.append(h('h1', {}, 'Groups'), box);
  async function act(group, pause) {
    const verb = pause ? 'pause' : 'resume';
    if (pause && !await confirmAction(`Pause every task of group ${group}?`, 'Pause group')) return;
    try {
      const r = await api.post(`groups/${api.enc(group)}/${verb}`, {note: `group ${verb} from the console`});
      toast(`${verb} ${group}: ${r.tasks} task(s)`);
    } catch (e) {
      toast(`${verb} ${group}: ${e.message}`, 'error');
    }
    await load();
  }
  async function load() {
    const r = await api.get('groups');
    replace(box, table(['Group', 'Total', ...STATES.map(s => stateBadge(s)), h('span', {class: 'needs-write'}, 'Actions')],
      r.groups.map(g => h('tr', {dataset: {group: g.group}},
        h('td', {}, h('a', {href: '#/tasks?group=' + encodeURIComponent(g.group)}, g.group)),
        h('td', {class: 'num'}, g.total),
        STATES.map(s => h('td', {class: 'num'}, g.states[s] || 0)),
        h('td', {class: 'needs-write'},
          h('button', {type: 'button', class: 'group-pause', onclick: () => act(g.group, true)}, 'Pause'), ' ',
          h('button', {type: 'button', class: 'group-resume', onclick: () => act(g.group, false)}, 'Resume')))), {id: 'groups-table'}));
    if (!r.count) replace(box, h('p', {class: 'muted'}, 'No tasks yet.'));
  }
  await load();
  return {refresh: load};
}
