// Groups: task counts by state, with pause and resume of a whole group. Each asks first and
// takes a note; a resume resumes only the tasks the group's pause paused and lists the
// others it left paused (paused on their own, by another group, after failures), with why.
import * as api from './api.js';
import {h, update, table, toast, confirmWithNote} from './dom.js';
import {STATES, stateBadge} from './tasks.js';

// byText says who paused a task, from its runtime's paused_by.
export function byText(by) {
  if (by === 'task') return 'its own pause';
  if (by === 'create') return 'its creation paused';
  if (by === 'bulk') return 'a bulk pause';
  if (by === 'failures') return 'pause_after_failures';
  if (by && by.startsWith('group:')) return `group ${by.slice(6)}'s pause`;
  return 'a pause from before origins were kept';
}

export async function render(main) {
  const box = h('div', {class: 'scroll', id: 'groups'});
  const left = h('div', {id: 'groups-left', 'aria-live': 'polite'});
  main.append(h('h1', {}, 'Groups'), left, box);
  async function act(group, pause) {
    const verb = pause ? 'pause' : 'resume';
    const ask = pause
      ? `Pause every task of group ${group} that is not paused? Tasks paused already keep their pause and note.`
      : `Resume the tasks of group ${group} that its pause paused? Tasks paused otherwise stay paused.`;
    const {ok, note} = await confirmWithNote(ask, pause ? 'Pause group' : 'Resume group', pause ? 'Why (note)' : 'Note');
    if (!ok) return;
    try {
      const r = await api.post(`groups/${api.enc(group)}/${verb}`, {note: note || `group ${verb} from the console`});
      if (pause) {
        toast(`pause ${group}: ${r.tasks} task(s) paused` + (r.already_paused ? `, ${r.already_paused} paused already` : ''));
        update(left);
      } else {
        toast(`resume ${group}: ${r.tasks} task(s) resumed` + (r.left_paused_count ? `, ${r.left_paused_count} left paused` : ''));
        showLeft(group, r);
      }
    } catch (e) {
      toast(`${verb} ${group}: ${e.message}`, 'error');
    }
    await load();
  }
  function showLeft(group, r) {
    if (!r.left_paused_count) { update(left); return; }
    const more = r.left_paused_count - r.left_paused.length;
    update(left, h('h2', {}, `Left paused in ${group}: ${r.left_paused_count} task(s) the group's pause did not pause`),
      table(['Task', 'Paused by', 'Note'], r.left_paused.map(p => h('tr', {dataset: {task: p.name}},
        h('td', {}, h('a', {href: '#/tasks/' + encodeURIComponent(p.name)}, p.name)),
        h('td', {}, byText(p.paused_by)), h('td', {}, p.note || '—'))), {id: 'groups-left-table'}),
      more > 0 ? h('p', {class: 'muted'}, `… and ${more} more: the task list filtered on group ${group} and PAUSED shows them.`) : null);
  }
  async function load() {
    const r = await api.get('groups');
    update(box, table(['Group', 'Total', ...STATES.map(s => stateBadge(s)), h('span', {class: 'needs-write'}, 'Actions')],
      r.groups.map(g => h('tr', {dataset: {group: g.group}},
        h('td', {}, h('a', {href: '#/tasks?group=' + encodeURIComponent(g.group)}, g.group)),
        h('td', {class: 'num'}, g.total),
        STATES.map(s => h('td', {class: 'num'}, g.states[s] || 0)),
        h('td', {class: 'needs-write'},
          h('button', {type: 'button', class: 'group-pause', onclick: () => act(g.group, true)}, 'Pause'), ' ',
          h('button', {type: 'button', class: 'group-resume', onclick: () => act(g.group, false)}, 'Resume')))), {id: 'groups-table'}));
    if (!r.count) update(box, h('p', {class: 'muted'}, 'No tasks yet.'));
  }
  await load();
  return {refresh: load};
}
