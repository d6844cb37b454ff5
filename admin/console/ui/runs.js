// Runs: every task's runs, newest first, filtered by result, group, task and time, one page
// at a time by cursor, with a bounded total. A filtered page examines at most 20,000 runs;
// when it found none there it says so, and Older goes on from where it stopped.
import * as api from './api.js';
import {h, update, table} from './dom.js';
import {killRun} from './run.js';
import {show, fmtDuration, zoneFor, parseLocal, toLocal} from './time.js';
import {RANGES} from './overview.js';

export const RESULT_CHOICES = [['', 'any result'], ['failure', 'failures (failed, timeout, lost)'], ['success', 'success'],
  ['failed', 'failed'], ['timeout', 'timeout'], ['lost', 'lost'], ['killed', 'killed'], ['skipped', 'skipped'], ['running', 'running']];
const PAGE = 50;
// SCAN_MAX is the server's bound on the runs one filtered page examines (persist.RunScanMax).
const SCAN_MAX = 20000;

// LONGER offers the "running longer than" choices: [value in the URL, label, ms].
export const LONGER = [['1m', '1 min', 60000], ['10m', '10 min', 600000], ['1h', '1 h', 3600000]];

// elapsed is how long a run in flight has been so, from its dispatch (its schedule before
// that); it grows with each refresh.
export function elapsed(r, now) { return Math.max(0, (now || Date.now()) - (r.dispatched_at || r.scheduled_at)); }

// clip shortens text for a table cell; the run page shows all of it.
function clip(s, n) { return s && s.length > n ? s.slice(0, n) + '…' : s || ''; }

// runsTable lists runs; opts.zone is the task's zone (or none for a list across tasks, where
// each run's task zone is unknown), opts.showTask adds the task column; a running row has a
// Kill button, after which opts.onKilled runs.
export function runsTable(runs, opts) {
  const rows = runs.map(r => h('tr', {dataset: {ticket: r.ticket, result: r.result}},
    h('td', {class: 'mono'}, h('a', {href: '#/run/' + encodeURIComponent(r.ticket)}, r.ticket)),
    opts.showTask ? h('td', {}, h('a', {href: '#/tasks/' + encodeURIComponent(r.task)}, r.task)) : null,
    h('td', {class: 'phone-hide'}, r.kind), h('td', {class: 'num phone-hide'}, r.attempt),
    h('td', {class: 'time'}, show(r.scheduled_at, opts.zone)), h('td', {class: 'phone-hide'}, r.executor || '—'),
    h('td', {class: 'num', dataset: r.result === 'running' ? {elapsed: String(elapsed(r))} : {}},
      r.result === 'running' ? 'running ' + fmtDuration(elapsed(r)) : fmtDuration(r.duration_ms)),
    h('td', {}, h('span', {class: 'result result-' + r.result}, r.result),
      r.result === 'running' ? [' ', h('button', {type: 'button', class: 'run-kill danger needs-write',
        onclick: () => killRun(r.ticket, opts.onKilled)}, 'Kill')] : null),
    h('td', {class: 'pre'}, clip([r.error, r.output].filter(Boolean).join('\n'), 160))));
  if (!runs.length) return h('p', {class: 'muted', id: opts.id}, 'No runs.');
  return table(['Ticket', opts.showTask ? 'Task' : null, 'Kind', 'Attempt', 'Scheduled', 'Executor', 'Duration', 'Result', 'Error / output']
    .filter(Boolean), rows, {id: opts.id, class: 'compact'});
}

export async function render(main, args) {
  const q = new URLSearchParams(args[0] || '');
  const zone = zoneFor('');
  const f = {result: q.get('result') || '', group: q.get('group') || '', task: q.get('task') || '',
    from: Number(q.get('from')) || 0, to: Number(q.get('to')) || 0, longer: q.get('longer') || ''};
  const result = h('select', {id: 'r-result', 'aria-label': 'Result'}, RESULT_CHOICES.map(([v, l]) => h('option', {value: v}, l)));
  result.value = f.longer ? 'running' : f.result;
  if (f.longer) f.result = 'running';
  const group = h('input', {id: 'r-group', type: 'search', value: f.group, placeholder: 'any group', 'aria-label': 'Group'});
  const task = h('input', {id: 'r-task', type: 'search', value: f.task, placeholder: 'any task (exact name)', 'aria-label': 'Task'});
  // Running longer than: the runs in flight (result running), those whose elapsed time
  // passed the choice, picked in the browser from the page the server sent.
  const longer = h('select', {id: 'r-longer', 'aria-label': 'Running longer than'}, h('option', {value: ''}, 'any'),
    LONGER.map(([v, l]) => h('option', {value: v}, l)));
  longer.value = f.longer;
  longer.addEventListener('change', () => { if (longer.value) result.value = 'running'; apply(); });
  const from = h('input', {id: 'r-from', type: 'datetime-local', step: 1, value: f.from ? toLocal(f.from, zone) : '', 'aria-label': 'From'});
  const to = h('input', {id: 'r-to', type: 'datetime-local', step: 1, value: f.to ? toLocal(f.to, zone) : '', 'aria-label': 'To'});
  const form = h('form', {class: 'filters', id: 'run-filters', role: 'search', onsubmit: ev => { ev.preventDefault(); apply(); }},
    h('label', {}, 'Result ', result), h('label', {}, 'Group ', group), h('label', {}, 'Task ', task),
    h('label', {}, 'Running longer than ', longer), h('label', {}, 'From ', from), h('label', {}, 'To ', to),
    h('button', {type: 'submit', id: 'r-apply'}, 'Filter'),
    h('span', {class: 'hint'}, `Times are read and shown in ${zone}. Newest first; a filtered page examines at most ${SCAN_MAX.toLocaleString('en')} runs.`));
  // Quick ranges: From that long ago, To open, applied at once.
  const ranges = h('div', {class: 'row ranges', role: 'group', 'aria-label': 'Quick range', id: 'run-ranges'}, 'Last ',
    RANGES.map(([v, label, ms]) => h('button', {type: 'button', dataset: {range: v}, onclick: () => {
      from.value = toLocal(Date.now() - ms, zone);
      to.value = '';
      apply();
    }}, label)));
  const status = h('p', {class: 'muted', id: 'runs-status', 'aria-live': 'polite'});
  const box = h('div', {class: 'scroll'});
  const pager = h('div', {class: 'row pager'});
  main.append(h('h1', {}, 'Runs'), form, ranges, status, box, pager);
  let cursors = [''];
  let page = 0;

  function apply() {
    f.result = result.value;
    f.group = group.value.trim();
    f.task = task.value.trim();
    f.from = from.value ? parseLocal(from.value, zone) : 0;
    f.to = to.value ? parseLocal(to.value, zone) : 0;
    if (f.result !== 'running') longer.value = '';
    f.longer = longer.value;
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) p.set(k, String(v));
    history.replaceState(null, '', '#/runs' + (p.toString() ? '?' + p.toString() : ''));
    cursors = [''];
    page = 0;
    load();
  }

  async function load() {
    const t0 = performance.now();
    const data = await api.get('runs', {result: f.longer ? 'running' : f.result, group: f.group, task: f.task, from: f.from || undefined,
      to: f.to || undefined, limit: PAGE, cursor: cursors[page], total: 1});
    const minMS = (LONGER.find(([v]) => v === f.longer) || [])[2] || 0;
    const now = Date.now();
    const shown = minMS ? data.runs.filter(r => r.result === 'running' && elapsed(r, now) >= minMS) : data.runs;
    update(box, runsTable(shown, {zone: '', showTask: true, id: 'all-runs-table', onKilled: load}));
    const total = data.total_more ? `${data.total.toLocaleString('en')}+` : String(data.total);
    const ms = Math.round(performance.now() - t0);
    const windowed = f.result || f.group ? ` among the newest ${SCAN_MAX.toLocaleString('en')}` : '';
    update(status, h('strong', {id: 'all-runs-total'}, `${total} run(s) match${windowed}`), `; ${data.count} on this page`,
      data.scanned >= SCAN_MAX && data.count < PAGE ? `, ${data.scanned.toLocaleString('en')} examined: Older goes on` : '',
      minMS ? h('span', {id: 'runs-longer'}, `; ${shown.length} of them running longer than ${longer.selectedOptions[0].textContent}`) : '',
      `. Loaded in ${ms} ms.`);
    status.dataset.ms = String(ms);
    status.dataset.total = String(data.total);
    status.dataset.seq = String(Number(status.dataset.seq || 0) + 1);
    update(pager,
      h('button', {type: 'button', id: 'runs-prev', disabled: page === 0, onclick: () => { page--; load(); }}, '← Newer'),
      h('span', {}, `Page ${page + 1}`),
      h('button', {type: 'button', id: 'runs-next', disabled: !data.next_cursor, onclick: () => { cursors[page + 1] = data.next_cursor; page++; load(); }}, 'Older →'));
  }

  await load();
  return {refresh: () => (page === 0 ? load() : null)};
}
