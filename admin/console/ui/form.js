// Create and edit: live cron validation with the next 10 fires as you type, a zone picker,
// and JSON params checked before anything is sent.
import * as api from './api.js';
import {h, replace, toast, debounce} from './dom.js';
import {zones} from './time.js';
import {firesTable} from './task.js';

// READ_ONLY are the fields of a task as read that are not part of its definition.
const READ_ONLY = new Set(['id', 'created_at', 'updated_at', 'runtime', 'paused', 'breaker_open', 'last_run']);

export async function render(main, args) {
  const editing = args[0];
  let t = {name: '', group: 'default', trigger: 'cron', cron: '*/10 * * * * *', timezone: '', timeout_sec: 60,
    retry_count: 0, retry_interval_sec: 10, priority: 0, misfire_policy: 'fire_once', callback: {type: 'http', url: ''}};
  if (editing) t = await api.get('tasks/' + api.enc(editing));
  // A new task starts in the server's zone, the one the API and the CLI give a task that
  // names none (UTC only when the server cannot be asked).
  else t.timezone = await api.get('overview').then(o => o.timezone || 'UTC', () => 'UTC');

  const field = (id, label, input, help) => h('div', {class: 'field'}, h('label', {for: id}, label), input,
    help ? h('small', {class: 'muted'}, help) : '', h('span', {class: 'error', id: id + '-error', role: 'alert'}));
  const inp = (id, value, attrs) => h('input', {id, name: id, value: value ?? '', ...attrs});

  const name = inp('name', t.name, {required: true, disabled: !!editing, autocomplete: 'off'});
  const group = inp('group', t.group);
  const trigger = h('select', {id: 'trigger'}, ['cron', 'delay', 'manual', 'dependency'].map(x => h('option', {value: x}, x)));
  trigger.value = t.trigger;
  const cron = inp('cron', t.cron || '', {autocomplete: 'off', spellcheck: 'false', class: 'mono'});
  const delay = inp('delay_ms', t.delay_ms || '', {type: 'number', min: 0});
  const deps = inp('depends_on', (t.depends_on || []).join(', '));
  const zoneList = h('datalist', {id: 'zones'}, zones().map(z => h('option', {value: z})));
  const tz = inp('timezone', t.timezone, {list: 'zones', autocomplete: 'off'});
  const cbType = h('select', {id: 'cb-type'}, h('option', {value: 'http'}, 'http'), h('option', {value: 'executor'}, 'executor'));
  cbType.value = (t.callback || {}).type || 'http';
  const cbURL = inp('cb-url', (t.callback || {}).url, {type: 'url', placeholder: 'http://host/path'});
  // The apps and handlers the registered executors offer, to pick from.
  const appList = h('datalist', {id: 'cb-apps'});
  const handlerList = h('datalist', {id: 'cb-handlers'});
  const cbApp = inp('cb-app', (t.callback || {}).app, {list: 'cb-apps', autocomplete: 'off'});
  const cbHandler = inp('cb-handler', (t.callback || {}).handler, {list: 'cb-handlers', autocomplete: 'off'});
  let offered = [];
  const fillHandlers = () => {
    const app = cbApp.value.trim();
    const hs = new Set();
    for (const x of offered) if (!app || x.app === app) for (const hd of x.handlers || []) hs.add(hd);
    replace(handlerList, [...hs].sort().map(v => h('option', {value: v})));
  };
  api.get('executors').then(r => {
    offered = r.executors;
    replace(appList, [...new Set(offered.map(x => x.app))].sort().map(v => h('option', {value: v})));
    fillHandlers();
  }, () => {});
  cbApp.addEventListener('input', fillHandlers);
  const params = h('textarea', {id: 'params', rows: 4, class: 'mono', spellcheck: 'false'});
  params.value = t.params !== undefined ? JSON.stringify(t.params, null, 2) : '';
  const sensitive = inp('sensitive_params', (t.sensitive_params || []).join(', '), {autocomplete: 'off'});
  const timeout = inp('timeout_sec', t.timeout_sec, {type: 'number', min: 1});
  const retries = inp('retry_count', t.retry_count, {type: 'number', min: 0});
  const retryEvery = inp('retry_interval_sec', t.retry_interval_sec, {type: 'number', min: 0});
  const prio = inp('priority', t.priority, {type: 'number', min: 0, max: 9});
  const pauseAfter = inp('pause_after_failures', t.pause_after_failures || 0, {type: 'number', min: 0, max: 1000});
  const jitter = inp('jitter_sec', t.jitter_sec || 0, {type: 'number', min: 0, max: 3600});
  const concKey = inp('concurrency_key', t.concurrency_key || '', {autocomplete: 'off'});
  const overlap = h('select', {id: 'overlap_policy'}, ['buffer_one', 'buffer_all', 'skip', 'cancel_other', 'allow_all'].map(v => h('option', {value: v}, v)));
  overlap.value = t.overlap_policy || 'buffer_one';
  const catchup = inp('catchup_window_sec', t.catchup_window_sec || 0, {type: 'number', min: 0, max: 31622400});
  const misfire = h('select', {id: 'misfire_policy'}, h('option', {value: 'fire_once'}, 'fire_once'), h('option', {value: 'skip'}, 'skip'));
  misfire.value = t.misfire_policy || 'fire_once';
  const preview = h('div', {id: 'cron-preview', class: 'scroll', 'aria-live': 'polite'});
  const previewN = h('select', {id: 'form-preview-n', 'aria-label': 'How many fires to preview'},
    [10, 25, 50, 100].map(n => h('option', {value: String(n)}, String(n))));
  const previewLegend = h('legend', {}, 'Next 10 fires');
  const formErr = h('p', {class: 'error', id: 'form-error', role: 'alert'});

  const cronField = field('cron', 'Cron expression', cron, 'sec min hour dom month dow, 5–7 fields, or @every 1m, @daily…');
  const delayField = field('delay_ms', 'Delay (ms)', delay);
  const jitterField = field('jitter_sec', 'Jitter (s)', jitter,
    'cron only: each fire leaves up to this many seconds after its time, by an offset fixed per task and fire; below the gap between fires; 0: none');
  const overlapField = field('overlap_policy', 'Overlap', overlap,
    'cron only: fires due while a run is in flight. buffer_one: the latest runs after it; buffer_all: each runs, oldest first (100 held); skip: none; cancel_other: the next fire kills the run and starts; allow_all: each runs at its time beside the others (no retries)');
  const catchupField = field('catchup_window_sec', 'Catch-up window (s)', catchup,
    'cron only: after downtime or a pause, each fire missed within this many seconds runs, oldest first; 0: none, the misfire policy decides');
  const depsField = field('depends_on', 'Depends on (comma-separated task names)', deps);
  const urlField = field('cb-url', 'Callback URL', cbURL);
  const appField = field('cb-app', 'Executor app', cbApp, 'the apps of registered executors are offered');
  appField.append(appList);
  const handlerField = field('cb-handler', 'Handler', cbHandler, 'the handlers the app\'s executors registered are offered');
  handlerField.append(handlerList);

  const form = h('form', {id: 'task-form', class: 'form', novalidate: true, onsubmit: submit},
    h('div', {class: 'cols'},
      h('fieldset', {}, h('legend', {}, 'Task'),
        field('name', 'Name', name), field('group', 'Group', group), field('trigger', 'Trigger', trigger),
        cronField, delayField, depsField, field('timezone', 'Time zone', tz, 'IANA name; fire times are shown in it'), zoneList),
      h('fieldset', {}, previewLegend, h('label', {}, 'Show ', previewN), preview)),
    h('fieldset', {}, h('legend', {}, 'Callback'), field('cb-type', 'Type', cbType), urlField, appField, handlerField,
      field('params', 'Params (JSON)', params),
      field('sensitive_params', 'Sensitive params keys (comma-separated)', sensitive,
        'their values are shown as *** in the console and the API; saving *** keeps the stored value')),
    h('fieldset', {}, h('legend', {}, 'Behaviour'), field('timeout_sec', 'Timeout (s)', timeout), field('retry_count', 'Retries', retries),
      field('retry_interval_sec', 'Retry interval (s)', retryEvery), field('priority', 'Priority (0 first)', prio),
      field('misfire_policy', 'Misfire', misfire),
      field('pause_after_failures', 'Pause after failures', pauseAfter, 'pause the task after this many failed runs in a row; 0: never'),
      jitterField, overlapField, catchupField,
      field('concurrency_key', 'Concurrency key', concKey, 'the runs of every task with this key count in the key\'s limit (Concurrency page), beside the group\'s; empty: none')),
    formErr,
    h('div', {class: 'row'}, h('button', {type: 'submit', id: 'save'}, editing ? 'Save' : 'Create'),
      h('a', {href: editing ? '#/tasks/' + encodeURIComponent(editing) : '#/tasks', class: 'button'}, 'Cancel')));
  main.append(h('h1', {}, editing ? 'Edit ' + editing : 'New task'), form);

  function setErr(id, msg) {
    const el = document.getElementById(id + '-error');
    if (el) el.textContent = msg || '';
    const input = document.getElementById(id);
    if (input) input.setAttribute('aria-invalid', msg ? 'true' : 'false');
  }

  function showFields() {
    const tr = trigger.value;
    cronField.hidden = tr !== 'cron';
    delayField.hidden = tr !== 'delay';
    jitterField.hidden = overlapField.hidden = catchupField.hidden = tr !== 'cron';
    depsField.hidden = tr !== 'dependency';
    urlField.hidden = cbType.value !== 'http';
    appField.hidden = handlerField.hidden = cbType.value !== 'executor';
    if (tr === 'cron') updatePreview(); else replace(preview, h('p', {class: 'muted'}, 'Only cron tasks have a preview.'));
  }

  let seq = 0;
  const updatePreview = debounce(async () => {
    const my = ++seq;
    const expr = cron.value.trim();
    if (!expr) { setErr('cron', 'cron: is required'); replace(preview); return; }
    try {
      // dialect: the task's cron dialect when the server has them (ignored otherwise).
      const n = Number(previewN.value);
      // With a jitter and a name, the preview also shows when each fire leaves.
      const j = Number(jitter.value) || 0, who = name.value.trim();
      const r = await api.get('cron/next', {expr, tz: tz.value.trim(), n, dialect: t.cron_dialect,
        task: j && who ? who : undefined, jitter_sec: j && who ? j : undefined});
      replace(previewLegend, `Next ${n} fires`);
      if (my !== seq) return;
      setErr('cron', '');
      setErr('timezone', '');
      setErr('jitter_sec', '');
      replace(preview, firesTable(r));
    } catch (e) {
      if (my !== seq) return;
      replace(preview, h('p', {class: 'muted'}, 'No preview.'));
      if (/^tz:/.test(e.message)) setErr('timezone', e.message);
      else if (/^jitter_sec:/.test(e.message)) setErr('jitter_sec', e.message);
      else setErr('cron', e.message);
    }
  }, 200);

  function checkParams() {
    const raw = params.value.trim();
    if (!raw) { setErr('params', ''); return {ok: true}; }
    try {
      const v = JSON.parse(raw);
      setErr('params', '');
      return {ok: true, v};
    } catch (e) {
      setErr('params', 'params: not valid JSON: ' + e.message);
      return {ok: false};
    }
  }

  async function submit(ev) {
    ev.preventDefault();
    formErr.textContent = '';
    const p = checkParams();
    if (!p.ok) { params.focus(); return; }
    const num = el => (el.value === '' ? undefined : Number(el.value));
    // An edit replaces the whole definition, so fields this form does not show (a newer
    // server's, like a cron dialect) are sent back as they were read.
    const keep = {};
    if (editing) {
      for (const [k, v] of Object.entries(t)) if (!READ_ONLY.has(k)) keep[k] = v;
      delete keep.params;
      delete keep.sensitive_params;
      delete keep.delay_ms;
      delete keep.depends_on;
      delete keep.cron;
    }
    const spec = {...keep, name: name.value.trim(), group: group.value.trim(), trigger: trigger.value, timezone: tz.value.trim(),
      timeout_sec: num(timeout), retry_count: num(retries), retry_interval_sec: num(retryEvery), priority: num(prio),
      misfire_policy: misfire.value, pause_after_failures: num(pauseAfter)};
    spec.jitter_sec = spec.trigger === 'cron' ? num(jitter) : undefined;
    spec.concurrency_key = concKey.value.trim() || undefined;
    spec.overlap_policy = spec.trigger === 'cron' ? overlap.value : undefined;
    spec.catchup_window_sec = spec.trigger === 'cron' ? num(catchup) : undefined;
    if (spec.trigger === 'cron') spec.cron = cron.value.trim();
    if (spec.trigger === 'delay') spec.delay_ms = num(delay);
    if (spec.trigger === 'dependency') spec.depends_on = deps.value.split(',').map(s => s.trim()).filter(Boolean);
    const was = editing && t.callback && t.callback.type === cbType.value ? t.callback : {};
    spec.callback = cbType.value === 'http' ? {...was, type: 'http', url: cbURL.value.trim()}
      : {...was, type: 'executor', app: cbApp.value.trim(), handler: cbHandler.value.trim()};
    if (p.v !== undefined) spec.params = p.v;
    const keys = sensitive.value.split(',').map(s => s.trim()).filter(Boolean);
    if (keys.length) spec.sensitive_params = keys;
    try {
      const saved = editing ? await api.call('PUT', 'tasks/' + api.enc(editing), spec) : await api.call('POST', 'tasks', spec);
      toast((editing ? 'Saved ' : 'Created ') + saved.name);
      location.hash = '#/tasks/' + encodeURIComponent(saved.name);
    } catch (e) {
      formErr.textContent = e.message;
      const m = e.message.match(/^([a-z_.]+):/);
      if (m) {
        const id = {'callback.url': 'cb-url', 'callback.app': 'cb-app', 'callback.handler': 'cb-handler'}[m[1]] || m[1];
        setErr(id, e.message);
      }
    }
  }

  cron.addEventListener('input', updatePreview);
  tz.addEventListener('input', updatePreview);
  tz.addEventListener('change', updatePreview);
  previewN.addEventListener('change', updatePreview);
  jitter.addEventListener('input', updatePreview);
  name.addEventListener('input', updatePreview);
  trigger.addEventListener('change', showFields);
  cbType.addEventListener('change', showFields);
  params.addEventListener('input', checkParams);
  showFields();
  (editing ? cron : name).focus();
  return {};
}
