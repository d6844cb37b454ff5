// One run: every stored field, with the whole output and error. A run in flight refreshes
// until it ends; a finished run no longer changes, so its page stops asking.
import * as api from './api.js';
import {h, update, toast, confirmAction, confirmWithNote} from './dom.js';
import {show, fmtDuration} from './time.js';

// The results a Retry is offered on.
const RETRYABLE = new Set(['failed', 'timeout', 'lost', 'killed']);

export async function render(main, args) {
  const ticket = args[0];
  const box = h('div', {id: 'run-detail'});
  const killBtn = h('button', {type: 'button', id: 'run-kill', class: 'danger needs-write', hidden: true,
    onclick: () => killRun(ticket, load)}, 'Kill');
  let task = '';
  const retryBtn = h('button', {type: 'button', id: 'run-retry', class: 'needs-write', hidden: true,
    onclick: () => retryRun(task, ticket, given)}, 'Retry');
  let given;
  main.append(h('h1', {}, 'Run ', h('span', {class: 'mono'}, ticket)), h('div', {class: 'actions'}, killBtn, retryBtn), box);
  let zone = '';
  const view = {refresh: load, done: false};
  async function load() {
    const r = await api.get('runs/' + api.enc(ticket));
    if (!zone) {
      // The task's zone, for "task zone" times; a deleted task's runs stay, in UTC.
      zone = await api.get('tasks/' + api.enc(r.task)).then(t => t.timezone, () => 'UTC');
    }
    task = r.task;
    given = r.params;
    killBtn.hidden = r.result !== 'running';
    retryBtn.hidden = !RETRYABLE.has(r.result);
    view.done = r.result !== 'running';
    box.dataset.result = r.result;
    const kv = rows => h('dl', {class: 'kv'}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    update(box,
      kv([
        ['Task', h('a', {href: '#/tasks/' + encodeURIComponent(r.task), id: 'run-task'}, r.task)],
        ['Result', h('span', {class: 'result result-' + r.result, id: 'run-result'}, r.result)],
        ['Kind', r.kind], ['Attempt', r.attempt],
        ['Scheduled', show(r.scheduled_at, zone)], ['Dispatched', show(r.dispatched_at, zone)],
        ['Ended', show(r.ended_at, zone)],
        // A run in flight shows how long it has been so, growing with each refresh.
        ['Duration', r.result === 'running'
          ? h('span', {id: 'run-elapsed'}, 'running ' + fmtDuration(Math.max(0, Date.now() - (r.dispatched_at || r.scheduled_at))))
          : fmtDuration(r.duration_ms)],
        ['Executor', r.executor || '—'],
        // A run-now's params given are stored with it; every other run had its task's.
        ['Params', r.params !== undefined
          ? h('pre', {id: 'run-params-given', class: 'block'}, JSON.stringify(r.params, null, 2))
          : h('span', {id: 'run-params-given', class: 'muted'}, r.kind === 'manual' ? 'the task\'s (none given)' : 'the task\'s')],
        // A fire that waited for a concurrency slot or the rate limit says how long and for
        // which limit in its detail ("waited 1.2s for …").
        ['Waited', h('span', {id: 'run-waits'}, waitsOf(r.detail).join('; ') || 'no wait for a limit')],
        ['Detail', r.detail || '—'],
      ]),
      h('h2', {}, 'Error'), h('pre', {id: 'run-error', class: 'block'}, r.error || '(none)'),
      h('h2', {}, 'Output'), h('pre', {id: 'run-output', class: 'block'}, r.output || '(none)'));
  }
  await load();
  return view;
}

// waitsOf lists a run detail's waits for a limit, each without its "waited ".
export function waitsOf(detail) {
  return (detail || '').split('; ').filter(p => p.startsWith('waited ')).map(p => p.slice('waited '.length));
}

// killRun asks for a reason and kills one run in flight by its ticket (any kind: periodic,
// run-now, allow_all, backfill); then calls done.
export async function killRun(ticket, done) {
  const {ok, note} = await confirmWithNote(`Kill run ${ticket}? Its executor is told to cancel it; what it printed so far is kept.`, 'Kill', 'Reason');
  if (!ok) return;
  try {
    const r = await api.post('runs/' + api.enc(ticket) + '/kill', note ? {reason: note} : {});
    toast(`Killed ${r.ticket}`);
  } catch (e) {
    toast('Kill: ' + e.message, 'error');
  }
  if (done) await done();
}

// retryRun runs the failed run's task now, once asked: with the params given to it when it
// was a run-now given some (a sensitive value, shown ***, takes the task's stored one),
// else with the task's params as they are now, and says which. On success the new run's
// page opens.
export async function retryRun(task, ticket, given) {
  const which = given !== undefined
    ? `The new run gets the params run ${ticket} was given.`
    : `Run ${ticket} was given no params of its own: the new run gets the task's params as they are now.`;
  if (!await confirmAction(`Run ${task} now again? ${which}`, 'Retry')) return;
  try {
    const r = await api.post('tasks/' + api.enc(task) + '/run', given !== undefined ? {params: given} : {});
    toast(`Retry of ${ticket}: run ${r.ticket}`);
    location.hash = '#/run/' + encodeURIComponent(r.ticket);
  } catch (e) {
    toast('Retry: ' + e.message, 'error');
  }
}
