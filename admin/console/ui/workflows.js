// Workflows: every workflow with its group, trigger, version, whether it is paused, its next
// cron fire and its newest run's state (GET /api/v1/workflows?last_run=1), with pause and
// resume on each row. The list refreshes in place; an unchanged answer (304) draws nothing.
import * as api from './api.js';
import {h, update, table, toast} from './dom.js';
import {show, fmtDuration} from './time.js';

// wfState is a workflow run's or step's state as a badge: running, succeeded, failed,
// cancelled, pending, skipped.
export function wfState(state, attrs) {
  return h('span', {class: 'state wf-' + String(state || 'pending'), ...(attrs || {})}, state || 'pending');
}

// triggerText says when a workflow runs: its cron in its zone, its delay, after which
// workflow, or manual.
export function triggerText(w) {
  if (w.trigger === 'cron') return `cron ${w.cron} (${w.timezone || 'UTC'})`;
  if (w.trigger === 'delay') return `delay ${(w.delay_ms || 0) / 1000} s after create, once`;
  if (w.trigger === 'workflow') return `after ${w.after}`;
  return w.trigger;
}

// runDuration is how long a run took, or has been running.
export function runDuration(r, now) {
  if (r.state === 'running') return 'running ' + fmtDuration(Math.max(0, (now || Date.now()) - r.created_at));
  return r.ended_at ? fmtDuration(r.ended_at - r.created_at) : '—';
}

export async function render(main) {
  const box = h('div', {class: 'scroll', id: 'workflows-box'});
  const status = h('p', {class: 'muted', id: 'workflows-status', 'aria-live': 'polite'});
  main.append(h('h1', {}, 'Workflows'),
    h('p', {class: 'hint'}, 'DAGs of steps run together for one logical time (docs/workflows.md). Created and changed through the API (POST /api/v1/workflows).'),
    box, status);

  async function setPaused(name, paused) {
    try {
      await api.post('workflows/' + api.enc(name) + (paused ? '/pause' : '/resume'), paused ? {note: 'paused from the console'} : {});
      toast((paused ? 'Paused ' : 'Resumed ') + name);
    } catch (e) {
      toast((paused ? 'Pause' : 'Resume') + ': ' + e.message, 'error');
    }
    await load();
  }

  let last = null;
  async function load() {
    const data = await api.get('workflows', {last_run: 1});
    // Running runs' durations grow: redraw those even when the answer is unchanged.
    if (api.unchanged(data) && last === data && !data.workflows.some(w => w.last_run && w.last_run.state === 'running')) return;
    last = data;
    const rows = data.workflows.map(w => {
      const lr = w.last_run;
      return h('tr', {dataset: {key: 'wf:' + w.name, paused: String(!!w.paused)}},
        h('td', {}, h('a', {href: '#/workflows/' + encodeURIComponent(w.name), class: 'wf-name'}, w.name)),
        h('td', {}, w.group || 'default'),
        h('td', {class: 'mono'}, triggerText(w)),
        h('td', {class: 'num phone-hide'}, 'v' + w.version),
        h('td', {}, w.paused ? h('span', {class: 'state state-paused'}, 'paused') : h('span', {class: 'muted'}, 'active')),
        h('td', {class: 'time'}, w.paused ? 'none while paused' : w.next_fire ? show(w.next_fire, w.timezone) : '—'),
        h('td', {class: 'last-run'}, lr ? [h('a', {href: '#/workflow-run/' + encodeURIComponent(lr.id)}, wfState(lr.state)), ' ',
          h('span', {class: 'time small'}, show(lr.scheduled_at, w.timezone)), ' · ', runDuration(lr)] : '—'),
        h('td', {class: 'needs-write'}, h('button', {type: 'button', class: 'wf-toggle', dataset: {key: 'toggle:' + w.name},
          onclick: () => setPaused(w.name, !w.paused)}, w.paused ? 'Resume' : 'Pause')));
    });
    update(box, data.workflows.length
      ? table(['Name', 'Group', 'Trigger', 'Version', 'Paused', 'Next fire', 'Last run', h('span', {class: 'needs-write'}, 'Action')], rows,
        {id: 'workflows-table', class: 'compact'})
      : h('p', {class: 'muted', id: 'workflows-table'}, 'No workflows yet. POST /api/v1/workflows creates one (docs/workflows.md).'));
    update(status, `${data.workflows.length} workflow(s).`);
    status.dataset.seq = String(Number(status.dataset.seq || 0) + 1);
  }

  await load();
  return {refresh: load};
}
