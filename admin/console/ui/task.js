// Task detail: the definition, the actions, its runs and its timeline through all retained
// history (page by page), a preview of its next fires with DST gaps and repeats marked, and a
// cron task's backfills with their progress (start one, cancel a running one).
// The action bar is built once: a refresh changes only what the task's state decides (which
// buttons are enabled, pause or resume), never an input being typed in.
import * as api from './api.js';
import {h, update, table, toast, confirmAction, confirmWithNote} from './dom.js';
import {byText} from './groups.js';
import {show, fmtDuration, zoneFor, parseLocal} from './time.js';
import {stateBadge} from './tasks.js';
import {runsTable, RESULT_CHOICES} from './runs.js';
import {RANGES} from './overview.js';

const RUNS_PAGE = 20;
const ACTS_PAGE = 50;
const PREVIEW_NS = [10, 25, 50, 100];

// TIMELINE_KINDS groups the timeline's action kinds for its filter.
const TIMELINE_KINDS = [
  ['', 'every event'],
  ['dispatch,result,retry,timeout,lost,misfire,resend,kill', 'runs (dispatch, result, retry, timeout, lost, kill)'],
  ['create,update,delete,pause,resume,run_now,kill', 'operator actions'],
  ['pause,resume', 'pause and resume'],
  ['breaker_open,breaker_close,final_failure,paused_on_failure', 'alerts'],
];

export async function render(main, args) {
  const name = args[0];
  const path = 'tasks/' + api.enc(name);
  const head = h('div', {class: 'title'});
  const def = h('div', {id: 'task-def'});
  const fires = h('div', {id: 'task-fires', class: 'scroll'});
  const runsBox = h('div', {id: 'task-runs', class: 'scroll'});
  const runsPager = h('div', {class: 'row pager'});
  const timeline = h('ol', {id: 'task-timeline', class: 'timeline'});
  const tlPager = h('div', {class: 'row pager'});

  let t = null;

  async function act(label, fn) {
    try {
      await fn();
      toast(label + ': done');
    } catch (e) {
      toast(label + ': ' + e.message, 'error');
      return false;
    }
    await load();
    return true;
  }

  // The action bar, built once.
  const note = h('input', {id: 'pause-note', type: 'text', placeholder: 'note (why)', 'aria-label': 'Pause note', maxlength: 1024});
  const resumeNote = h('input', {id: 'resume-note', type: 'text', placeholder: 'note', 'aria-label': 'Resume note', maxlength: 1024});
  // Run now's params: pre-filled with the task's (a sensitive value shows as ***, which the
  // server replaces with the stored one), editable for this run alone. What the box holds
  // is sent and stored on the run; emptied, the run gets the task's params. A refresh
  // leaves the box alone once it was edited; "task's params" fills it again.
  const params = h('textarea', {id: 'run-params', rows: 3, placeholder: 'params JSON (empty: the task\'s)', 'aria-label': 'Run-now params'});
  let filled = ''; // what the box was last filled with: another value is the user's
  const taskParamsText = () => (t && t.params !== undefined && t.params !== null ? JSON.stringify(t.params, null, 2) : '');
  const fillParams = () => { params.value = filled = taskParamsText(); };
  const paramsReset = h('button', {type: 'button', class: 'link', id: 'run-params-reset', onclick: fillParams}, 'task\'s params');
  const paramsErr = h('span', {class: 'error', id: 'run-params-error', role: 'alert'});
  const pauseBtn = h('button', {type: 'button', id: 'act-pause', onclick: async () => {
    if (await act('Pause', () => api.post(path + '/pause', {note: note.value}))) note.value = '';
  }}, 'Pause');
  const resumeBtn = h('button', {type: 'button', id: 'act-resume', onclick: async () => {
    if (await act('Resume', () => api.post(path + '/resume', {note: resumeNote.value}))) resumeNote.value = '';
  }}, 'Resume');
  const pauseGroup = h('span', {class: 'group'}, note, pauseBtn);
  const resumeGroup = h('span', {class: 'group'}, resumeNote, resumeBtn);
  const killBtn = h('button', {type: 'button', id: 'act-kill', class: 'danger',
    onclick: async () => {
      const ask = await confirmWithNote(`Kill every run of ${name} in flight (periodic, run-now, allow_all, backfill)?`, 'Kill', 'Reason');
      if (ask.ok) act('Kill', () => api.post(path + '/kill', ask.note ? {reason: ask.note} : {}));
    }}, 'Kill');
  const actions = h('div', {class: 'actions needs-write', id: 'task-actions'},
    pauseGroup, resumeGroup,
    h('span', {class: 'group run-now'}, h('label', {class: 'stack'}, 'Params for this run ', params), h('button', {type: 'button', id: 'act-run', onclick: async () => {
      let body = {};
      const raw = params.value.trim();
      if (raw) {
        try { body = {params: JSON.parse(raw)}; } catch (e) { paramsErr.textContent = 'params: ' + e.message; return; }
      }
      paramsErr.textContent = '';
      let r;
      try {
        r = await api.post(path + '/run', body);
      } catch (e) {
        toast('Run now: ' + e.message, 'error');
        return;
      }
      // The new run's ticket, linked to its page.
      toast(h('span', {}, 'Run now: ', h('a', {href: '#/run/' + encodeURIComponent(r.ticket), class: 'mono', id: 'run-now-ticket'}, r.ticket),
        raw ? ' with the params given' : ' with the task\'s params'));
      fillParams();
      await load();
    }}, 'Run now'), paramsReset, paramsErr),
    h('span', {class: 'group'}, killBtn,
      h('a', {href: '#/tasks/' + encodeURIComponent(name) + '/edit', class: 'button', id: 'act-edit'}, 'Edit'),
      h('button', {type: 'button', id: 'act-delete', class: 'danger', onclick: async () => {
        if (!await confirmAction(`Delete ${name}? Its runs and action records are removed.`, 'Delete')) return;
        try { await api.call('DELETE', path); toast('Deleted ' + name); location.hash = '#/tasks'; } catch (e) { toast('Delete: ' + e.message, 'error'); }
      }}, 'Delete')));

  function updateActions() {
    const paused = t.runtime.state === 'PAUSED' || t.paused;
    pauseGroup.hidden = paused;
    resumeGroup.hidden = !paused;
    // Kill stays enabled: a run-now, allow_all or backfill run may be in flight whatever the
    // task's state; a kill with none answers 409, shown as a toast.
  }

  // Runs: a page at a time, newest first, with a result filter.
  const runResult = h('select', {id: 'runs-result', 'aria-label': 'Runs with result'}, RESULT_CHOICES.map(([v, l]) => h('option', {value: v}, l)));
  runResult.addEventListener('change', () => { runCursors = ['']; runPage = 0; loadRuns(); });
  // A quick range: the runs scheduled within the last 15 min, hour, day or week.
  const runRange = h('select', {id: 'runs-range', 'aria-label': 'Runs within'}, h('option', {value: ''}, 'any time'),
    RANGES.map(([v, label]) => h('option', {value: v}, 'the last ' + label)));
  runRange.addEventListener('change', () => { runCursors = ['']; runPage = 0; loadRuns(); });
  const runsTotal = h('span', {class: 'muted', id: 'runs-total'});
  let runCursors = [''];
  let runPage = 0;

  // Timeline: a page at a time before a time, with a kind filter.
  const tlKind = h('select', {id: 'timeline-kind', 'aria-label': 'Timeline events'}, TIMELINE_KINDS.map(([v, l]) => h('option', {value: v}, l)));
  tlKind.addEventListener('change', () => { tlBefore = [0]; tlPage = 0; loadTimeline(); });
  let tlBefore = [0];
  let tlPage = 0;

  // Preview: N fires from a time (default now), in the task's zone.
  const previewN = h('select', {id: 'preview-n', 'aria-label': 'How many fires'}, PREVIEW_NS.map(n => h('option', {value: String(n)}, String(n))));
  const previewFrom = h('input', {id: 'preview-from', type: 'datetime-local', step: 1, 'aria-label': 'Preview from'});
  const previewNow = h('button', {type: 'button', class: 'link', id: 'preview-now', onclick: () => { previewFrom.value = ''; firesKey = ''; renderFires(); }}, 'from now');
  previewN.addEventListener('change', () => { firesKey = ''; renderFires(); });
  previewFrom.addEventListener('change', () => { firesKey = ''; renderFires(); });
  const firesHead = h('h2', {id: 'fires-h'}, 'Next fires');

  // Backfills (a cron task's): the newest, with their progress; a form starts one.
  const backfills = h('div', {id: 'task-backfills', class: 'scroll'});
  const bfFrom = h('input', {id: 'backfill-from', type: 'text', placeholder: 'from, RFC 3339 (2025-01-01T00:00:00Z)', 'aria-label': 'Backfill from'});
  const bfTo = h('input', {id: 'backfill-to', type: 'text', placeholder: 'to, RFC 3339', 'aria-label': 'Backfill to'});
  const bfParallel = h('input', {id: 'backfill-parallel', type: 'number', min: 1, max: 256, value: 4, 'aria-label': 'Backfill parallelism'});
  const bfErr = h('span', {class: 'error', id: 'backfill-error', role: 'alert'});
  const bfStart = h('button', {type: 'button', id: 'backfill-start', onclick: async () => {
    try {
      await api.post(path + '/backfill', {from: bfFrom.value.trim(), to: bfTo.value.trim(), parallel: Number(bfParallel.value)});
      bfErr.textContent = '';
      toast('Backfill: started');
    } catch (e) {
      bfErr.textContent = e.message;
      return;
    }
    await loadBackfills();
  }}, 'Start backfill');
  const bfSection = h('section', {'aria-labelledby': 'bf-h', id: 'backfills-section'}, h('h2', {id: 'bf-h'}, 'Backfills'),
    h('div', {class: 'row needs-write'}, bfFrom, bfTo, h('label', {}, 'parallel ', bfParallel), bfStart, bfErr), backfills);

  main.append(head, actions,
    h('div', {class: 'cols'},
      h('section', {'aria-labelledby': 'def-h'}, h('h2', {id: 'def-h'}, 'Definition'), def),
      h('section', {'aria-labelledby': 'fires-h'}, firesHead,
        h('div', {class: 'row'}, h('label', {}, 'Show ', previewN), h('label', {}, 'from ', previewFrom), previewNow), fires)),
    bfSection,
    h('section', {'aria-labelledby': 'runs-h'}, h('h2', {id: 'runs-h'}, 'Runs'),
      h('div', {class: 'row'}, h('label', {}, 'Result ', runResult), h('label', {}, 'Within ', runRange), runsTotal,
        h('a', {href: '#/runs?task=' + encodeURIComponent(name), id: 'runs-all'}, 'in the runs list')),
      runsBox, runsPager),
    h('section', {'aria-labelledby': 'tl-h'}, h('h2', {id: 'tl-h'}, 'Timeline (newest first)'),
      h('div', {class: 'row'}, h('label', {}, 'Show ', tlKind)), timeline, tlPager));

  function kv(rows) {
    return h('dl', {class: 'kv'}, rows.filter(r => r[1] !== undefined && r[1] !== '' && r[1] !== null)
      .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }

  function renderDef() {
    const cb = t.callback || {};
    const zone = t.timezone;
    update(head, h('h1', {}, t.name), stateBadge(t.runtime.state), t.runtime.note ? h('span', {class: 'note', id: 'task-note'}, 'Note: ' + t.runtime.note) : '',
      t.runtime.paused_by ? h('span', {class: 'note', id: 'task-paused-by'}, 'Paused by ' + byText(t.runtime.paused_by)) : '');
    const rt = t.runtime;
    update(def, kv([
      ['Group', t.group], ['Trigger', t.trigger], ['Cron', t.cron], ['Delay', t.delay_ms ? fmtDuration(t.delay_ms) : ''],
      // Each upstream task opens its page.
      ['Depends on', (t.depends_on || []).length ? h('span', {id: 'task-deps'}, t.depends_on.map((n, i) =>
        [i ? ', ' : '', h('a', {href: '#/tasks/' + encodeURIComponent(n), class: 'dep', dataset: {task: n}}, n)])) : ''],
      ['Time zone', zone],
      ['Callback', cb.type === 'http' ? 'http ' + cb.url : `executor ${cb.app}/${cb.handler}${cb.route ? ' (' + cb.route + ')' : ''}`],
      ['Timeout', t.timeout_sec + ' s'], ['Retries', `${t.retry_count} every ${t.retry_interval_sec} s`],
      ['Priority', t.priority], ['Misfire', t.misfire_policy],
      ['Pause on failure', t.pause_after_failures
        ? h('span', {id: 'task-pause-after'}, `after ${t.pause_after_failures} consecutive failed runs (${rt.consecutive_failures || 0} now)`)
        : 'off'],
      ['Jitter', t.jitter_sec
        ? h('span', {id: 'task-jitter'}, `each fire leaves up to ${t.jitter_sec} s after its time` +
          (rt.next_jitter_ms != null ? `; the next one ${fmtDuration(rt.next_jitter_ms)} after, at ${show(rt.next_trigger_time + rt.next_jitter_ms, zone)}` : ''))
        : 'off'],
      ['Concurrency', h('span', {id: 'task-concurrency'}, h('a', {href: '#/limits'}, `group ${t.group}` + (t.concurrency_key ? `, key ${t.concurrency_key}` : '')))],
      ['Overlap', t.trigger === 'cron' ? h('span', {id: 'task-overlap'}, {
        buffer_one: 'buffer_one: the latest fire due during a run runs after it',
        buffer_all: 'buffer_all: each fire due during a run runs after it, oldest first (100 held)',
        skip: 'skip: fires due during a run are skipped',
        cancel_other: 'cancel_other: the next fire kills the run in flight and starts',
        allow_all: 'allow_all: every fire runs at its time, beside the runs in flight',
      }[t.overlap_policy || 'buffer_one'] || t.overlap_policy) : ''],
      ['Catch-up window', t.trigger === 'cron' ? h('span', {id: 'task-catchup'}, t.catchup_window_sec
        ? `fires missed within ${fmtDuration(t.catchup_window_sec * 1000)} run one by one, oldest first` : 'off (misfire policy)') : ''],
      ['Params', t.params !== undefined ? h('pre', {id: 'task-params'}, JSON.stringify(t.params, null, 2)) : ''],
      ['Next fire', rt.state === 'PAUSED' ? 'none while paused' : rt.next_trigger_time ? show(rt.next_trigger_time, zone) : '—'],
      ['Last fire', show(rt.last_trigger_time, zone)], ['Last end', show(rt.last_end_time, zone)],
      ['Last result', rt.last_result ? h('span', {class: 'result result-' + rt.last_result, id: 'task-last-result'}, rt.last_result) : '—'],
      ['Last failure', rt.last_failure_at ? show(rt.last_failure_at, zone) : 'none recorded'],
      // Counted from the stored runs of every kind (run-now and backfill too), so a manual
      // task's runs count; the runtime's counters count the scheduled runs since creation.
      ['Successes / failures', h('span', {id: 'task-counts'}, counts ? `${countText(counts.success)} / ${countText(counts.failure)} (stored runs)` : '…')],
      ['Scheduled runs', t.trigger === 'manual' ? '' : `${rt.success_count} succeeded, ${rt.failure_count} failed since created`],
      ['Breaker', t.breaker_open ? 'open' : 'closed'],
    ]));
  }

  let firesKey = '';
  let firesSeq = 0; // the latest preview asked for (renderFires)
  async function renderFires() {
    if (t.trigger !== 'cron') { update(fires, h('p', {class: 'muted'}, 'Not a cron task.')); return; }
    const n = Number(previewN.value);
    const from = previewFrom.value ? parseLocal(previewFrom.value, t.timezone) : 0;
    const key = [t.cron, t.timezone, t.runtime.state, n, from, t.jitter_sec || 0].join('|');
    if (key === firesKey) return;
    firesKey = key;
    update(firesHead, `Next ${n} fires` + (from ? ' from ' + show(from, t.timezone) : ''));
    // Only the latest preview draws: an earlier one answering after it (its N or its start
    // changed meanwhile) would put the old fires under the new heading.
    const seq = ++firesSeq;
    try {
      const r = await api.get('cron/next', {expr: t.cron, tz: t.timezone, n, from: from || undefined, dialect: t.cron_dialect,
        task: t.jitter_sec ? t.name : undefined, jitter_sec: t.jitter_sec || undefined});
      if (seq !== firesSeq) return;
      update(fires, t.runtime.state === 'PAUSED' ? h('p', {class: 'note'}, 'Paused: the schedule would fire at these times once resumed.') : '', firesTable(r));
    } catch (e) {
      if (seq !== firesSeq) return;
      update(fires, h('p', {class: 'error'}, e.message));
    }
  }

  async function loadRuns() {
    const range = RANGES.find(r => r[0] === runRange.value);
    const rs = await api.get(path + '/runs', {limit: RUNS_PAGE, cursor: runCursors[runPage], result: runResult.value, total: 1,
      from: range ? Math.floor((Date.now() - range[2]) / 60000) * 60000 : undefined});
    update(runsBox, runsTable(rs.runs, {zone: t.timezone, showTask: false, id: 'runs-table', onKilled: load}));
    update(runsTotal, rs.total_more ? `${rs.total.toLocaleString('en')}+ runs` : `${rs.total} run(s)`,
      rs.scanned >= 20000 && !rs.runs.length ? ' · none among the newest examined; look further with Older' : '');
    update(runsPager,
      h('button', {type: 'button', id: 'runs-newer', disabled: runPage === 0, onclick: () => { runPage--; loadRuns(); }}, '← Newer'),
      h('span', {}, `Page ${runPage + 1}`),
      h('button', {type: 'button', id: 'runs-older', disabled: !rs.next_cursor, onclick: () => { runCursors[runPage + 1] = rs.next_cursor; runPage++; loadRuns(); }}, 'Older →'));
  }

  async function loadTimeline() {
    const acts = await api.get(path + '/actions', {limit: ACTS_PAGE, before: tlBefore[tlPage] || undefined, action: tlKind.value});
    const zone = t.timezone;
    update(timeline, acts.actions.map(a => h('li', {dataset: {action: a.action, key: [a.at, a.action, a.actor, a.ticket || ''].join('|')}},
      h('span', {class: 'time'}, show(a.at, zone)), ' ',
      h('strong', {class: 'kind'}, a.action), ' ',
      a.from || a.to ? h('span', {class: 'trans'}, `${a.from || '·'} → ${a.to || '·'}`) : '', ' ',
      h('span', {class: 'actor'}, 'by ' + a.actor), a.ticket ? [' ', h('a', {class: 'mono', href: '#/run/' + encodeURIComponent(a.ticket)}, a.ticket)] : '',
      a.detail ? detailOf(a) : '')));
    if (!acts.actions.length) update(timeline, h('li', {class: 'muted'}, tlKind.value ? 'No such events.' : 'No action records yet.'));
    update(tlPager,
      h('button', {type: 'button', id: 'timeline-newer', disabled: tlPage === 0, onclick: () => { tlPage--; loadTimeline(); }}, '← Newer'),
      h('span', {}, `Page ${tlPage + 1}`),
      h('button', {type: 'button', id: 'timeline-older', disabled: !acts.next_before,
        onclick: () => { tlBefore[tlPage + 1] = acts.next_before; tlPage++; loadTimeline(); }}, 'Older →'));
  }

  async function loadBackfills() {
    bfSection.hidden = t.trigger !== 'cron';
    if (bfSection.hidden) return;
    const r = await api.get(path + '/backfills', {limit: 10});
    const zone = t.timezone;
    const rows = (r.backfills || []).map(b => h('tr', {dataset: {backfill: String(b.id), status: b.status}},
      h('td', {class: 'num'}, b.id),
      h('td', {}, h('span', {class: 'status status-' + b.status}, b.status)),
      h('td', {class: 'time'}, show(Date.parse(b.from), zone) + ' – ' + show(Date.parse(b.to), zone)),
      h('td', {class: 'num progress'}, `${b.done.toLocaleString('en')} / ${b.total.toLocaleString('en')}`),
      h('td', {class: 'num'}, b.failed), h('td', {class: 'num'}, b.skipped),
      h('td', {class: 'num running'}, `${b.running} of ${b.parallel}`),
      h('td', {class: 'time'}, b.next_fire_time ? show(Date.parse(b.next_fire_time), zone) : '—'),
      h('td', {}, b.status === 'running'
        ? h('button', {type: 'button', class: 'danger needs-write', id: 'backfill-cancel-' + b.id, onclick: async () => {
          if (!await confirmAction(`Cancel backfill ${b.id} of ${name}? Its runs in flight finish; no new one starts.`, 'Cancel backfill')) return;
          try { await api.post(path + '/backfills/' + b.id + '/cancel'); toast('Backfill ' + b.id + ': canceled'); } catch (e) { toast('Cancel: ' + e.message, 'error'); }
          await loadBackfills();
        }}, 'Cancel') : '')));
    update(backfills, rows.length
      ? table(['#', 'Status', 'Range', 'Done / total', 'Failed', 'Skipped', 'Running', 'Next fire', ''], rows, {id: 'backfills-table'})
      : h('p', {class: 'muted'}, 'No backfills.'));
  }

  let counts = null;
  const countText = r => (r.total_more ? r.total.toLocaleString('en') + '+' : String(r.total));
  const countOf = result => api.get(path + '/runs', {result, limit: 1, total: 1});

  async function load() {
    const [task, list, success, failure] = await Promise.all([
      api.get(path),
      api.get('tasks', {name_prefix: name, limit: 1, sort: 'name'}).catch(() => ({tasks: []})),
      countOf('success').catch(() => null), countOf('failure').catch(() => null),
    ]);
    t = task;
    counts = success && failure ? {success, failure} : null;
    const row = (list.tasks || []).find(x => x.name === name);
    t.breaker_open = row ? row.breaker_open : false;
    renderDef();
    updateActions();
    if (params.value === filled && document.activeElement !== params) fillParams();
    renderFires();
    // Pages past the first stay as they are until paged: a refresh must not move them.
    await Promise.all([runPage === 0 ? loadRuns() : null, tlPage === 0 ? loadTimeline() : null, loadBackfills()]);
  }

  await load();
  return {refresh: load};
}

// DIFF_MARKER starts the changed fields in an update record's detail (engine.DiffMarker):
// a JSON object of field → [before, after].
const DIFF_MARKER = 'changed: {';

// detailOf shows an action's detail; an edit's changed fields become a table of field,
// before and after (a value as JSON, absent as —, a sensitive param as ***).
export function detailOf(a) {
  const at = a.action === 'update' ? a.detail.indexOf(DIFF_MARKER) : -1;
  let changes = null;
  if (at >= 0) {
    try { changes = JSON.parse(a.detail.slice(at + DIFF_MARKER.length - 1)); } catch { changes = null; }
  }
  if (!changes) return h('div', {class: 'detail'}, a.detail);
  const val = v => (v === null || v === undefined ? '—' : JSON.stringify(v));
  const rest = a.detail.slice(0, at).replace(/;\s*$/, '');
  return h('div', {class: 'detail'}, rest,
    table(['Field', 'Before', 'After'], Object.entries(changes).map(([k, [b, v]]) => h('tr', {dataset: {field: k}},
      h('td', {class: 'mono'}, k), h('td', {class: 'mono before'}, val(b)), h('td', {class: 'mono after'}, val(v)))),
    {class: 'diff'}));
}

// firesTable shows a cron/next answer: each fire in the zone with its offset and DST mark,
// and, when the console shows times in another zone, the same instant there.
// A jittered preview (jitter_sec) adds each fire's jitter and the instant it leaves.
export function firesTable(r) {
  const other = zoneFor(r.timezone);
  const also = other !== r.timezone;
  const jit = !!r.jitter_sec;
  const rows = (r.fires || []).map((f, i) => h('tr', {class: f.dst ? 'dst dst-' + f.dst : ''},
    h('td', {class: 'num'}, i + 1),
    h('td', {class: 'time'}, f.at.replace('T', ' ').replace(/([+-]\d\d:\d\d|Z)$/, '')),
    h('td', {class: 'mono'}, f.offset),
    also ? h('td', {class: 'time'}, show(Date.parse(f.at), r.timezone)) : null,
    jit ? h('td', {class: 'num jitter'}, fmtDuration(f.jitter_ms)) : null,
    jit ? h('td', {class: 'time leaves'}, show(Date.parse(f.fire_at), r.timezone)) : null,
    h('td', {}, f.dst === 'gap' ? 'DST gap: moved to the end of the skipped hour' : f.dst === 'repeat' ? 'DST repeat: this wall time occurs twice' : '')));
  return h('div', {}, h('p', {class: 'muted'}, 'Zone ' + r.timezone),
    table(['#', 'Fire time (' + r.timezone + ')', 'Offset', also ? 'In ' + other : null,
      jit ? 'Jitter' : null, jit ? 'Leaves at' : null, 'DST'].filter(Boolean), rows, {class: 'fires', id: 'fires-table'}));
}
