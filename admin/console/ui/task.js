// Task detail: the definition, the actions, recent runs, the action-record timeline and
// the next 10 fire times in the task's zone with DST gaps and repeats marked.
import * as api from './api.js';
import {h, replace, table, toast, confirmAction} from './dom.js';
import {fmtTime, fmtZoned, fmtDuration} from './time.js';
import {stateBadge} from './tasks.js';

export async function render(main, args) {
  const name = args[0];
  const path = 'tasks/' + api.enc(name);
  const head = h('div', {class: 'title'});
  const actions = h('div', {class: 'actions needs-write', id: 'task-actions'});
  const def = h('div', {id: 'task-def'});
  const fires = h('div', {id: 'task-fires'});
  const runs = h('div', {id: 'task-runs', class: 'scroll'});
  const timeline = h('ol', {id: 'task-timeline', class: 'timeline'});
  main.append(head, actions,
    h('div', {class: 'cols'},
      h('section', {'aria-labelledby': 'def-h'}, h('h2', {id: 'def-h'}, 'Definition'), def),
      h('section', {'aria-labelledby': 'fires-h'}, h('h2', {id: 'fires-h'}, 'Next 10 fires'), fires)),
    h('section', {'aria-labelledby': 'runs-h'}, h('h2', {id: 'runs-h'}, 'Recent runs'), runs),
    h('section', {'aria-labelledby': 'tl-h'}, h('h2', {id: 'tl-h'}, 'Timeline (action records, newest first)'), timeline));

  let t = null;
  let firesKey = '';

  async function act(label, fn) {
    try {
      await fn();
      toast(label + ': done');
    } catch (e) {
      toast(label + ': ' + e.message, 'error');
    }
    await load();
  }

  function renderActions() {
    const note = h('input', {id: 'pause-note', type: 'text', placeholder: 'note (why)', 'aria-label': 'Pause note', maxlength: 1024});
    const params = h('textarea', {id: 'run-params', rows: 2, placeholder: 'params JSON (optional)', 'aria-label': 'Run-now params'});
    const paramsErr = h('span', {class: 'error', id: 'run-params-error', role: 'alert'});
    const paused = t.runtime.state === 'PAUSED' || t.paused;
    replace(actions,
      paused
        ? h('span', {class: 'group'}, h('input', {id: 'resume-note', type: 'text', placeholder: 'note', 'aria-label': 'Resume note'}),
          h('button', {type: 'button', id: 'act-resume', onclick: () => act('Resume', () =>
            api.post(path + '/resume', {note: document.getElementById('resume-note').value}))}, 'Resume'))
        : h('span', {class: 'group'}, note, h('button', {type: 'button', id: 'act-pause', onclick: () => act('Pause', () =>
          api.post(path + '/pause', {note: note.value}))}, 'Pause')),
      h('span', {class: 'group'}, params, h('button', {type: 'button', id: 'act-run', onclick: () => {
        let body = {};
        const raw = params.value.trim();
        if (raw) {
          try { body = {params: JSON.parse(raw)}; } catch (e) { paramsErr.textContent = 'params: ' + e.message; return; }
        }
        paramsErr.textContent = '';
        act('Run now', () => api.post(path + '/run', body));
      }}, 'Run now'), paramsErr),
      h('span', {class: 'group'},
        h('button', {type: 'button', id: 'act-kill', class: 'danger', disabled: t.runtime.state !== 'RUNNING' && t.runtime.state !== 'RETRYING',
          onclick: async () => { if (await confirmAction(`Kill the run of ${name} in flight?`, 'Kill')) act('Kill', () => api.post(path + '/kill')); }}, 'Kill'),
        h('a', {href: '#/tasks/' + encodeURIComponent(name) + '/edit', class: 'button', id: 'act-edit'}, 'Edit'),
        h('button', {type: 'button', id: 'act-delete', class: 'danger', onclick: async () => {
          if (!await confirmAction(`Delete ${name}? Its runs and action records are removed.`, 'Delete')) return;
          try { await api.call('DELETE', path); toast('Deleted ' + name); location.hash = '#/tasks'; } catch (e) { toast('Delete: ' + e.message, 'error'); }
        }}, 'Delete')));
  }

  function kv(rows) {
    return h('dl', {class: 'kv'}, rows.filter(r => r[1] !== undefined && r[1] !== '' && r[1] !== null)
      .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }

  function renderDef() {
    const cb = t.callback || {};
    const zone = t.timezone;
    replace(head, h('h1', {}, t.name), stateBadge(t.runtime.state), t.runtime.note ? h('span', {class: 'note', id: 'task-note'}, 'Note: ' + t.runtime.note) : '');
    replace(def, kv([
      ['Group', t.group], ['Trigger', t.trigger], ['Cron', t.cron], ['Delay', t.delay_ms ? fmtDuration(t.delay_ms) : ''],
      ['Depends on', (t.depends_on || []).join(', ')], ['Time zone', zone],
      ['Callback', cb.type === 'http' ? 'http ' + cb.url : `executor ${cb.app}/${cb.handler}${cb.route ? ' (' + cb.route + ')' : ''}`],
      ['Timeout', t.timeout_sec + ' s'], ['Retries', `${t.retry_count} every ${t.retry_interval_sec} s`],
      ['Priority', t.priority], ['Misfire', t.misfire_policy],
      ['Params', t.params !== undefined ? h('pre', {id: 'task-params'}, JSON.stringify(t.params, null, 2)) : ''],
      ['Next fire', t.runtime.state === 'PAUSED' ? 'none while paused' : t.runtime.next_trigger_time ? fmtZoned(t.runtime.next_trigger_time, zone) : '—'],
      ['Last fire', fmtZoned(t.runtime.last_trigger_time, zone)], ['Last end', fmtZoned(t.runtime.last_end_time, zone)],
      ['Successes / failures', `${t.runtime.success_count} / ${t.runtime.failure_count}`],
      ['Breaker', t.breaker_open ? 'open' : 'closed'],
    ]));
  }

  async function renderFires() {
    if (t.trigger !== 'cron') { replace(fires, h('p', {class: 'muted'}, 'Not a cron task.')); return; }
    const key = t.cron + '|' + t.timezone + '|' + t.runtime.state;
    if (key === firesKey) return;
    firesKey = key;
    try {
      const r = await api.get('cron/next', {expr: t.cron, tz: t.timezone, n: 10});
      replace(fires, t.runtime.state === 'PAUSED' ? h('p', {class: 'note'}, 'Paused: the schedule would fire at these times once resumed.') : '', firesTable(r));
    } catch (e) {
      replace(fires, h('p', {class: 'error'}, e.message));
    }
  }

  async function load() {
    const [task, list, rs, acts] = await Promise.all([
      api.get(path),
      api.get('tasks', {name_prefix: name, limit: 1, sort: 'name'}).catch(() => ({tasks: []})),
      api.get(path + '/runs', {limit: 20}),
      api.get(path + '/actions', {limit: 50}),
    ]);
    t = task;
    const row = (list.tasks || []).find(x => x.name === name);
    t.breaker_open = row ? row.breaker_open : false;
    renderDef();
    renderActions();
    renderFires();
    const zone = t.timezone;
    replace(runs, table(['Ticket', 'Kind', 'Attempt', 'Scheduled', 'Executor', 'Duration', 'Result', 'Error / output'],
      rs.runs.map(r => h('tr', {dataset: {ticket: r.ticket}},
        h('td', {class: 'mono'}, r.ticket), h('td', {}, r.kind), h('td', {class: 'num'}, r.attempt),
        h('td', {class: 'time'}, fmtTime(r.scheduled_at, zone)), h('td', {}, r.executor || '—'),
        h('td', {class: 'num'}, r.result === 'running' ? 'running' : fmtDuration(r.duration_ms)),
        h('td', {}, h('span', {class: 'result result-' + r.result}, r.result)),
        h('td', {class: 'pre'}, [r.error, r.output].filter(Boolean).join('\n')))), {id: 'runs-table'}));
    replace(timeline, acts.actions.map(a => h('li', {dataset: {action: a.action}},
      h('span', {class: 'time'}, fmtTime(a.at, zone)), ' ',
      h('strong', {class: 'kind'}, a.action), ' ',
      a.from || a.to ? h('span', {class: 'trans'}, `${a.from || '·'} → ${a.to || '·'}`) : '', ' ',
      h('span', {class: 'actor'}, 'by ' + a.actor), a.ticket ? h('span', {class: 'mono'}, ' ' + a.ticket) : '',
      a.detail ? h('div', {class: 'detail'}, a.detail) : '')));
    if (!acts.actions.length) replace(timeline, h('li', {class: 'muted'}, 'No action records yet.'));
  }

  await load();
  return {refresh: load};
}

// firesTable shows a cron/next answer: each fire in the zone with its offset and DST mark.
export function firesTable(r) {
  const rows = (r.fires || []).map((f, i) => h('tr', {class: f.dst ? 'dst dst-' + f.dst : ''},
    h('td', {class: 'num'}, i + 1),
    h('td', {class: 'time'}, f.at.replace('T', ' ').replace(/([+-]\d\d:\d\d|Z)$/, '')),
    h('td', {class: 'mono'}, f.offset),
    h('td', {}, f.dst === 'gap' ? 'DST gap: moved to the end of the skipped hour' : f.dst === 'repeat' ? 'DST repeat: this wall time occurs twice' : '')));
  return h('div', {}, h('p', {class: 'muted'}, 'Zone ' + r.timezone),
    table(['#', 'Fire time (' + r.timezone + ')', 'Offset', 'DST'], rows, {class: 'fires', id: 'fires-table'}));
}
