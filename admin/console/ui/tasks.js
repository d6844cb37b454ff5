// Tasks: the list, filtered by group, state, name prefix, a search over name, group and
// callback, the last result, a recent failure and an open breaker, one page at a time by
// cursor, sorted by a column the store serves from an index (name, group, next fire), with
// the total that matches.
import * as api from './api.js';
import {h, update, table, toast, confirmAction, debounce} from './dom.js';
import {show, fmtDuration} from './time.js';

export const STATES = ['WAITING', 'SCHEDULED', 'RUNNING', 'SUCCESS', 'FAILED', 'RETRYING', 'PAUSED', 'KILLED'];
const SORTS = [['id', 'created'], ['name', 'name'], ['group', 'group'], ['next', 'next fire']];
const PAGE = 50;
// TICKET is what a run's ticket looks like: a periodic fire's (task-time-attempt), a
// run-now's (task-m<time>-hex) or a skipped fire's (skip-task-time).
const TICKET = /^(?:skip-)?\d+-[a-z]?\d+(?:-[0-9a-f]+)?$/i;

// failCount says how many of a task's runs failed in a row (now) and in all (its scheduled
// runs since created).
export function failCount(rt) {
  const parts = [];
  if (rt.consecutive_failures) parts.push(`${rt.consecutive_failures} in a row`);
  if (rt.failure_count) parts.push(`${rt.failure_count.toLocaleString('en')} failed in all`);
  return parts.length ? ' · ' + parts.join(', ') : '';
}

export function stateBadge(state) {
  return h('span', {class: 'state state-' + String(state).toLowerCase()}, state);
}

export async function render(main, args, session) {
  const q = new URLSearchParams(args[0] || '');
  const f = {group: q.get('group') || '', state: q.get('state') || '', name_prefix: q.get('name_prefix') || '',
    q: q.get('q') || '', last_result: q.get('last_result') || '', failed_within: q.get('failed_within') || '',
    breaker: q.get('breaker') || '', sort: q.get('sort') || 'name'};
  let cursors = [''];          // cursor of each page visited, for Previous
  let page = 0;
  let next = null;
  const selected = new Set();

  const group = h('input', {id: 'f-group', type: 'search', value: f.group, placeholder: 'any group', 'aria-label': 'Group'});
  const prefix = h('input', {id: 'f-name', type: 'search', value: f.name_prefix, placeholder: 'name starts with…', 'aria-label': 'Name prefix'});
  const state = h('select', {id: 'f-state', 'aria-label': 'State'}, h('option', {value: ''}, 'any state'),
    STATES.map(s => h('option', {value: s}, s)));
  state.value = f.state;
  const search = h('input', {id: 'f-q', type: 'search', value: f.q, placeholder: 'words or a ticket…', 'aria-label': 'Search'});
  // The search applies as you type, 250 ms after the last key; a ticket opens its run.
  search.addEventListener('input', debounce(() => find(), 250));
  const lastResult = h('select', {id: 'f-last', 'aria-label': 'Last result'}, h('option', {value: ''}, 'any'),
    ['success', 'failed', 'timeout', 'lost', 'killed', 'skipped'].map(r => h('option', {value: r}, r)));
  lastResult.value = f.last_result;
  const failedWithin = h('select', {id: 'f-failed', 'aria-label': 'Failed within'}, h('option', {value: ''}, 'any time or never'),
    [['15m', 'the last 15 min'], ['1h', 'the last hour'], ['24h', 'the last 24 h'], ['168h', 'the last 7 days']].map(([v, l]) => h('option', {value: v}, l)));
  failedWithin.value = f.failed_within;
  const breaker = h('select', {id: 'f-breaker', 'aria-label': 'Breaker'}, h('option', {value: ''}, 'any'), h('option', {value: 'open'}, 'open'));
  breaker.value = f.breaker;
  const filters = h('form', {class: 'filters', id: 'task-filters', role: 'search', onsubmit: ev => { ev.preventDefault(); find(); }},
    h('label', {}, 'Search ', search), h('label', {}, 'Group ', group), h('label', {}, 'State ', state), h('label', {}, 'Name ', prefix),
    h('label', {}, 'Last result ', lastResult), h('label', {}, 'Failed within ', failedWithin), h('label', {}, 'Breaker ', breaker),
    h('button', {type: 'submit', id: 'f-apply'}, 'Filter'),
    h('span', {class: 'hint'}, 'Sortable columns (▲): name, group, next fire, newest failure first — each served by an index. Name filters by prefix. Search finds the tasks whose name, group or callback holds every word, in any case; a run\'s ticket opens that run. A periodic task that fails stays SCHEDULED: find it by last result or failed within.'));
  const bulkBar = h('div', {class: 'bulk needs-write', id: 'bulk'});
  const status = h('p', {class: 'muted', id: 'list-status', 'aria-live': 'polite'});
  const tableBox = h('div', {class: 'scroll'});
  const pager = h('div', {class: 'row pager'});
  main.append(h('h1', {}, 'Tasks'), filters, bulkBar, tableBox, pager, status);

  // find applies the filters, or opens the run whose ticket the search box holds.
  let findSeq = 0;
  async function find() {
    const v = search.value.trim();
    const seq = ++findSeq;
    if (TICKET.test(v)) {
      try {
        await api.get('runs/' + api.enc(v));
        if (seq === findSeq) location.hash = '#/run/' + encodeURIComponent(v);
        return;
      } catch (e) {
        if (e.status !== 404) { toast('Ticket ' + v + ': ' + e.message, 'error'); return; }
      }
    }
    if (seq === findSeq) apply();
  }

  function apply() {
    f.group = group.value.trim();
    f.state = state.value;
    f.name_prefix = prefix.value.trim();
    f.q = search.value.trim();
    f.last_result = lastResult.value;
    f.failed_within = failedWithin.value;
    f.breaker = breaker.value;
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) p.set(k, v);
    history.replaceState(null, '', '#/tasks?' + p.toString());
    cursors = [''];
    page = 0;
    selected.clear();
    allMatching = false;
    totalAge = 0;
    load();
  }

  function sortHeader(key, label) {
    const active = f.sort === key;
    return h('button', {type: 'button', class: 'sort' + (active ? ' active' : ''), 'aria-pressed': active ? 'true' : 'false',
      title: 'Sort by ' + label, onclick: () => { f.sort = key; apply(); }}, label + (active ? ' ▲' : ' △'));
  }

  // The bulk bar acts on the ticked rows ({"names": [...]}) or, after "Select all
  // matching", on every task the applied filter matches, however many pages it spans.
  let allMatching = false;

  function filterSelector() {
    const sel = {};
    for (const k of ['group', 'name_prefix', 'state']) if (f[k]) sel[k] = f[k];
    return sel;
  }

  function describe(sel) {
    return Object.entries(sel).map(([k, v]) => `${k.replace('_', ' ')} ${k === 'name_prefix' ? 'starts with ' : '= '}${v}`).join(', ');
  }

  // The bulk endpoint selects by group, name prefix and state; the other filters it cannot
  // repeat, so with them only the ticked rows can be acted on.
  const bulkable = () => !f.q && !f.last_result && !f.failed_within && !f.breaker;

  // The bulk bar is built once and updated in place, so a refresh keeps the focus on its
  // buttons.
  const bulkWhat = h('span', {id: 'bulk-what'});
  const bulkBtns = {};
  for (const a of ['pause', 'resume', 'run', 'delete']) {
    bulkBtns[a] = h('button', {type: 'button', id: 'bulk-' + a, class: a === 'delete' ? 'danger' : null, onclick: () => doBulk(a)},
      a === 'run' ? 'Run now' : a[0].toUpperCase() + a.slice(1));
  }
  const bulkAll = h('button', {type: 'button', id: 'bulk-all', class: 'link', onclick: () => { allMatching = !allMatching; renderBulk(); }});
  bulkBar.append(bulkWhat, bulkBtns.pause, bulkBtns.resume, bulkBtns.run, bulkBtns.delete, bulkAll);

  function renderBulk() {
    const names = [...selected];
    const hasFilter = Object.keys(filterSelector()).length > 0 && bulkable();
    if (!hasFilter) allMatching = false;
    const any = allMatching || names.length > 0;
    const label = allMatching ? `All tasks matching ${describe(filterSelector())}` : `${names.length} selected`;
    update(bulkWhat, label);
    for (const b of Object.values(bulkBtns)) b.disabled = !any;
    update(bulkAll, allMatching ? 'Back to the ticked rows' : 'Select all matching the filter');
    bulkAll.disabled = !allMatching && !hasFilter;
    bulkAll.title = allMatching || hasFilter ? 'Act on every task the filter matches, on every page'
      : bulkable() ? 'Apply a filter first' : 'Bulk actions select by group, name and state only: tick the rows';
  }

  const verbs = {pause: 'Pause', resume: 'Resume', run: 'Run now', delete: 'Delete'};

  async function doBulk(action) {
    const sel = allMatching ? filterSelector() : {names: [...selected]};
    if (action === 'pause') sel.note = 'bulk pause from the console';
    let count;
    try {
      // The confirmation shows what the server would touch now, not what this page shows.
      count = allMatching ? await api.bulk(action, sel, true) : sel.names.length;
    } catch (e) {
      toast(`${action}: ${e.message}`, 'error');
      return;
    }
    const what = allMatching ? `all ${count} task(s) matching ${describe(filterSelector())}` : `${count} task(s)`;
    const warn = action === 'delete' ? ' Their runs and records are removed.' : '';
    if ((allMatching || action === 'delete' || action === 'pause') &&
      !await confirmAction(`${verbs[action]} ${what}?${warn}`, verbs[action])) return;
    try {
      const n = await api.bulk(action, sel, false);
      toast(`${action}: ${n} task(s) done`);
    } catch (e) {
      toast(`${action}: ${e.message}`, 'error');
    }
    selected.clear();
    allMatching = false;
    // What matches has changed: count it again now, not at the tenth refresh.
    totalAge = 0;
    await load();
  }

  let totalAge = 0;
  let lastTotal = null;

  // loadSeq numbers the loads: only the latest one started may draw, so the answer of a
  // refresh sent before the search changed cannot replace the new search's rows.
  let loadSeq = 0;
  async function load() {
    const t0 = performance.now();
    const seq = ++loadSeq;
    // The total is counted when the filter or page changes and every tenth refresh after: a
    // filter no index serves (a search, a last result) counts by reading every row.
    const withTotal = totalAge++ % 10 === 0;
    const data = await api.get('tasks', {...f, limit: PAGE, cursor: cursors[page], last_run: 1, total: withTotal ? 1 : undefined});
    if (seq !== loadSeq) {
      if (withTotal) totalAge = 0; // its count is not drawn: the next load counts
      return;
    }
    if (withTotal) lastTotal = {total: data.total, total_more: data.total_more};
    // A first page with no next one holds every match: its rows are the count, whatever the
    // last count said (a bulk pause may have just emptied the filter).
    const total = page === 0 && !data.next_cursor ? {total: data.tasks.length, total_more: false} : lastTotal;
    next = data.next_cursor || null;
    const rows = data.tasks.map(t => {
      const rt = t.runtime;
      const lr = t.last_run;
      const box = h('input', {type: 'checkbox', class: 'needs-write', 'aria-label': 'Select ' + t.name, checked: selected.has(t.name),
        dataset: {key: 'sel:' + t.name},
        onchange: ev => { if (ev.target.checked) selected.add(t.name); else selected.delete(t.name); renderBulk(); }});
      return h('tr', {dataset: {task: t.name}},
        h('td', {}, box),
        h('td', {}, h('a', {href: '#/tasks/' + encodeURIComponent(t.name)}, t.name)),
        h('td', {}, t.group),
        h('td', {}, stateBadge(rt.state)),
        h('td', {class: 'time'}, rt.state === 'PAUSED' ? 'paused' : rt.next_trigger_time ? show(rt.next_trigger_time, t.timezone) : '—'),
        h('td', {}, lr ? h('a', {href: '#/run/' + encodeURIComponent(lr.ticket), class: 'result result-' + lr.result}, lr.result) : '—',
          lr && lr.duration_ms ? ' · ' + fmtDuration(lr.duration_ms) : '',
          // The newest failure, with how many failed in a row and in all (scheduled runs).
          rt.last_failure_at ? h('div', {class: 'muted small failed-at', dataset: {at: String(rt.last_failure_at)}}, 'failed ' + show(rt.last_failure_at, t.timezone),
            h('span', {class: 'fail-count'}, failCount(rt))) : ''),
        h('td', {class: 'num phone-hide'}, t.priority),
        h('td', {class: t.breaker_open ? null : 'phone-hide'}, t.breaker_open ? h('span', {class: 'state state-failed'}, 'open') : 'closed'),
        h('td', {class: 'note'}, rt.note || ''));
    });
    update(tableBox, table([h('span', {class: 'needs-write'}, 'Sel'), sortHeader('name', 'Name'), sortHeader('group', 'Group'), 'State',
      sortHeader('next', 'Next fire'), sortHeader('failed', 'Last result, newest failure'), 'Priority', 'Breaker', 'Note'], rows, {id: 'task-table', class: 'compact sortable'}));
    if (!data.tasks.length) update(tableBox, h('p', {class: 'muted', id: 'task-table'}, 'No task matches.'));
    update(pager,
      h('button', {type: 'button', id: 'page-prev', disabled: page === 0, onclick: () => { page--; load(); }}, '← Previous'),
      h('span', {}, `Page ${page + 1}`),
      h('button', {type: 'button', id: 'page-next', disabled: !next, onclick: () => { cursors[page + 1] = next; page++; load(); }}, 'Next →'));
    const ms = Math.round(performance.now() - t0);
    const shown = total.total_more ? `${total.total.toLocaleString('en')}+` : String(total.total);
    update(status, h('strong', {id: 'list-total'}, `${shown} task(s) match`), `; ${data.count} on this page, loaded in ${ms} ms.`);
    status.dataset.total = String(total.total);
    status.dataset.ms = String(ms);
    status.dataset.count = String(data.count);
    status.dataset.seq = String(Number(status.dataset.seq || 0) + 1);
    renderBulk();
  }

  await load();
  return {refresh: load};
}
