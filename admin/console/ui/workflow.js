// One workflow: its definition (trigger, params, the steps with their needs, callbacks,
// conditions and fan-outs), its runs newest first by logical time, and the actions: pause
// and resume with a note, run now with the params pre-filled from the definition and
// editable, and a backfill of a range of logical times with its progress.
// The action bar and the forms are built once: a refresh never touches what is being typed.
import * as api from './api.js';
import {h, update, table, toast} from './dom.js';
import {show, fmtDuration} from './time.js';
import {wfState, triggerText, runDuration} from './workflows.js';

const RUNS_PAGE = 20;

export async function render(main, args) {
  const name = args[0];
  const path = 'workflows/' + api.enc(name);
  let w = await api.get(path);

  const head = h('div', {class: 'title', id: 'wf-title'});
  const def = h('div', {id: 'wf-def'});
  const stepsBox = h('div', {id: 'wf-steps', class: 'scroll'});
  const runsBox = h('div', {id: 'wf-runs', class: 'scroll'});
  const runsPager = h('div', {class: 'row pager'});
  const bfStatus = h('div', {id: 'wf-backfill-status'});

  async function act(label, fn) {
    try {
      const r = await fn();
      toast(label + ': done');
      await load();
      return r || true;
    } catch (e) {
      toast(label + ': ' + e.message, 'error');
      return false;
    }
  }

  // Pause / resume with a note.
  const note = h('input', {id: 'wf-pause-note', type: 'text', placeholder: 'note (why)', 'aria-label': 'Pause note', maxlength: 1024});
  const pauseBtn = h('button', {type: 'button', id: 'wf-pause', onclick: async () => {
    if (await act('Pause', () => api.post(path + '/pause', {note: note.value.trim()}))) note.value = '';
  }}, 'Pause');
  const resumeBtn = h('button', {type: 'button', id: 'wf-resume', onclick: () => act('Resume', () => api.post(path + '/resume', {}))}, 'Resume');
  const pauseGroup = h('span', {class: 'group'}, note, pauseBtn);

  // Run now: the params start as the definition's, to edit.
  const params = h('textarea', {id: 'wf-run-params', rows: 3, class: 'mono', spellcheck: 'false', 'aria-label': 'Run-now params (JSON)'});
  params.value = w.params !== undefined ? JSON.stringify(w.params, null, 2) : '';
  params.rows = Math.min(10, Math.max(3, params.value.split('\n').length));
  const paramsErr = h('span', {class: 'error', id: 'wf-run-params-error', role: 'alert'});
  const runBtn = h('button', {type: 'button', id: 'wf-run', onclick: async () => {
    let body = {};
    const raw = params.value.trim();
    if (raw) {
      try { body = {params: JSON.parse(raw)}; } catch (e) { paramsErr.textContent = 'params: not valid JSON: ' + e.message; params.setAttribute('aria-invalid', 'true'); return; }
    }
    paramsErr.textContent = '';
    params.setAttribute('aria-invalid', 'false');
    const r = await act('Run now', () => api.post(path + '/run', body));
    if (r && r.id) location.hash = '#/workflow-run/' + encodeURIComponent(r.id);
  }}, 'Run now');
  const actions = h('div', {class: 'actions needs-write', id: 'wf-actions'}, pauseGroup, h('span', {class: 'group'}, resumeBtn),
    h('span', {class: 'group wf-run-group'}, h('label', {class: 'field'}, 'Params (JSON)', params), runBtn, paramsErr));

  // Backfill: every cron fire time in [from, to), at most parallel at once.
  const bfFrom = h('input', {id: 'wf-backfill-from', type: 'text', placeholder: 'from, RFC 3339 (2026-11-25T00:00:00Z)', 'aria-label': 'Backfill from'});
  const bfTo = h('input', {id: 'wf-backfill-to', type: 'text', placeholder: 'to, RFC 3339 (not included)', 'aria-label': 'Backfill to'});
  const bfParallel = h('input', {id: 'wf-backfill-parallel', type: 'number', min: 1, max: 64, value: 2, 'aria-label': 'Backfill parallelism'});
  const bfErr = h('span', {class: 'error', id: 'wf-backfill-error', role: 'alert'});
  const bfStart = h('button', {type: 'button', id: 'wf-backfill-start', onclick: async () => {
    try {
      await api.post(path + '/backfill', {from: bfFrom.value.trim(), to: bfTo.value.trim(), parallel: Number(bfParallel.value)});
      bfErr.textContent = '';
      toast('Backfill: started');
    } catch (e) {
      bfErr.textContent = e.message;
      return;
    }
    await load();
  }}, 'Start backfill');
  const bfSection = h('section', {'aria-labelledby': 'wf-bf-h', id: 'wf-backfill'}, h('h2', {id: 'wf-bf-h'}, 'Backfill'),
    h('p', {class: 'hint'}, 'One run of the whole DAG for each cron fire time in [from, to); a time that has a run already is skipped.'),
    h('div', {class: 'row needs-write'}, bfFrom, bfTo, h('label', {}, 'parallel ', bfParallel), bfStart, bfErr), bfStatus);

  main.append(head, actions,
    h('div', {class: 'cols'},
      h('section', {'aria-labelledby': 'wf-def-h'}, h('h2', {id: 'wf-def-h'}, 'Definition'), def),
      h('section', {'aria-labelledby': 'wf-steps-h'}, h('h2', {id: 'wf-steps-h'}, 'Steps'), stepsBox)),
    h('section', {'aria-labelledby': 'wf-runs-h'}, h('h2', {id: 'wf-runs-h'}, 'Runs (newest logical time first)'), runsBox, runsPager),
    bfSection);

  const kv = rows => h('dl', {class: 'kv'}, rows.filter(r => r[1] !== undefined && r[1] !== '' && r[1] !== null)
    .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));

  function renderDef() {
    update(head, h('h1', {}, w.name), w.paused ? h('span', {class: 'state state-paused', id: 'wf-paused'}, 'paused') : '',
      h('a', {href: '#/workflows', class: 'small'}, 'all workflows'));
    pauseGroup.hidden = !!w.paused;
    resumeBtn.hidden = !w.paused;
    bfSection.hidden = w.trigger !== 'cron';
    update(def, kv([
      ['Group', w.group || 'default'], ['Trigger', h('span', {class: 'mono'}, triggerText(w))],
      ['Misfire', w.trigger === 'cron' ? w.misfire_policy || 'fire_once' : ''],
      ['Version', h('span', {id: 'wf-version'}, String(w.version))],
      ['Next fire', w.trigger !== 'cron' && w.trigger !== 'delay' ? '' : w.paused ? 'none while paused'
        : w.next_fire ? show(w.next_fire, w.timezone) : w.trigger === 'delay' ? 'none: its one run started' : '—'],
      ['Params', w.params !== undefined ? h('pre', {id: 'wf-params'}, JSON.stringify(w.params, null, 2)) : ''],
      ['Created', show(w.created_at, w.timezone)], ['Updated', show(w.updated_at, w.timezone)],
    ]));
    const rows = (w.steps || []).map(s => {
      const cb = s.callback || {};
      return h('tr', {dataset: {key: 'step:' + s.name}},
        h('td', {}, s.name),
        h('td', {}, (s.needs || []).join(', ') || '—'),
        h('td', {class: 'mono small'}, cb.type === 'http' ? cb.url : `${cb.app}/${cb.handler}`),
        h('td', {}, [s.condition && s.condition !== 'all_succeeded' ? s.condition : '',
          s.fan_out ? `fan-out over ${s.fan_out}` + (s.parallelism ? ` (${s.parallelism} at once)` : '') : ''].filter(Boolean).join('; ') || '—'),
        h('td', {class: 'num phone-hide'}, `${s.timeout_sec || 60} s` + (s.retry_count ? `, ${s.retry_count} retries` : '')));
    });
    update(stepsBox, table(['Step', 'Needs', 'Callback', 'Condition / fan-out', 'Timeout'], rows, {id: 'wf-steps-table', class: 'compact'}));
  }

  // Runs: pages by logical time (the API's before is a scheduled_at).
  let befores = [0];
  let page = 0;
  async function loadRuns() {
    const data = await api.get(path + '/runs', {limit: RUNS_PAGE, before: befores[page] || undefined});
    const now = Date.now();
    const rows = data.runs.map(r => h('tr', {dataset: {key: 'run:' + r.id, state: r.state}},
      h('td', {class: 'mono'}, h('a', {href: '#/workflow-run/' + encodeURIComponent(r.id)}, r.id)),
      h('td', {}, wfState(r.state)),
      h('td', {class: 'time'}, show(r.scheduled_at, w.timezone)),
      h('td', {class: 'phone-hide'}, r.trigger), h('td', {class: 'num phone-hide'}, 'v' + r.version),
      h('td', {class: 'num'}, runDuration(r, now)),
      h('td', {class: 'pre'}, r.error || '')));
    update(runsBox, data.runs.length
      ? table(['Run', 'State', 'Logical time', 'Trigger', 'Version', 'Duration', 'Error'], rows, {id: 'wf-runs-table', class: 'compact'})
      : h('p', {class: 'muted', id: 'wf-runs-table'}, 'No runs yet.'));
    const last = data.runs[data.runs.length - 1];
    update(runsPager,
      h('button', {type: 'button', id: 'wf-runs-newer', disabled: page === 0, onclick: () => { page--; loadRuns(); }}, '← Newer'),
      h('span', {}, `Page ${page + 1}`),
      h('button', {type: 'button', id: 'wf-runs-older', disabled: data.runs.length < RUNS_PAGE,
        onclick: () => { befores[page + 1] = last.scheduled_at; page++; loadRuns(); }}, 'Older →'));
  }

  async function loadBackfill() {
    if (w.trigger !== 'cron') return;
    try {
      const b = await api.get(path + '/backfill');
      update(bfStatus, h('p', {id: 'wf-backfill-progress', dataset: {done: String(b.done)}},
        `${b.done ? 'Done' : 'Running'}: ${b.started} of ${b.times} logical time(s) started, ${b.skipped} skipped (a run existed), ${b.running} running.`));
    } catch (e) {
      update(bfStatus, h('p', {class: e.status === 404 ? 'muted' : 'error', id: 'wf-backfill-progress'},
        e.status === 404 ? 'No backfill of this workflow yet.' : e.message));
    }
  }

  async function load() {
    w = await api.get(path);
    renderDef();
    await Promise.all([page === 0 ? loadRuns() : null, loadBackfill()]);
  }

  renderDef();
  await Promise.all([loadRuns(), loadBackfill()]);
  return {refresh: load};
}

// fmtSpan is a step's or run's time from start to end (to now while it runs).
export function fmtSpan(start, end, now) {
  if (!start) return '—';
  return fmtDuration(Math.max(0, (end || now || Date.now()) - start));
}
