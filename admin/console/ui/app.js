// The console's shell: hash routing, the login, the scope, the backup banner and the
// polling that keeps the page current without a reload.
import * as api from './api.js';
import {h, replace, toast} from './dom.js';
import * as overview from './overview.js';
import * as tasks from './tasks.js';
import * as task from './task.js';
import * as form from './form.js';
import * as executors from './executors.js';
import * as groups from './groups.js';
import * as runs from './runs.js';
import * as run from './run.js';
import * as alerts from './alerts.js';
import * as ratelimits from './ratelimits.js';
import * as limits from './limits.js';
import * as nodes from './nodes.js';
import * as workflows from './workflows.js';
import * as workflow from './workflow.js';
import * as wfrun from './wfrun.js';
import {ZONE_MODES, zoneMode, setZoneMode} from './time.js';

const routes = [
  [/^#\/overview$/, overview, 'overview'],
  [/^#\/tasks(?:\?(.*))?$/, tasks, 'tasks'],
  [/^#\/new$/, form, 'new'],
  [/^#\/tasks\/([^/?]+)\/edit$/, form, 'tasks'],
  [/^#\/tasks\/([^/?]+)$/, task, 'tasks'],
  [/^#\/executors$/, executors, 'executors'],
  [/^#\/groups$/, groups, 'groups'],
  [/^#\/runs(?:\?(.*))?$/, runs, 'runs'],
  [/^#\/run\/([^/?]+)$/, run, 'runs'],
  [/^#\/alerts(?:\?(.*))?$/, alerts, 'alerts'],
  [/^#\/ratelimits$/, ratelimits, 'ratelimits'],
  [/^#\/limits$/, limits, 'limits'],
  [/^#\/nodes$/, nodes, 'nodes'],
  [/^#\/workflows$/, workflows, 'workflows'],
  [/^#\/workflows\/([^/?]+)$/, workflow, 'workflows'],
  [/^#\/workflow-run\/([^/?]+)$/, wfrun, 'workflows'],
];

// How often a page reloads its data: chosen in the header and kept in localStorage, with a
// pause that stops the reloads until resumed.
const REFRESH_CHOICES = [[2000, '2 s'], [5000, '5 s'], [10000, '10 s'], [30000, '30 s'], [60000, '1 min']];
const REFRESH_KEY = 'axe.refreshMS';
const PAUSED_KEY = 'axe.refreshPaused';

function pollMS() {
  const v = Number(localStorage.getItem(REFRESH_KEY));
  return REFRESH_CHOICES.some(([ms]) => ms === v) ? v : 2000;
}

function refreshPaused() { return localStorage.getItem(PAUSED_KEY) === '1'; }

export const session = {scope: 'write', name: '', canWrite: true};

let current = null; // {page, stop}
let pollTimer = null;

function setScope(who) {
  session.name = who.name;
  session.scope = who.scope;
  session.canWrite = who.scope === 'write';
  document.body.classList.toggle('scope-read', !session.canWrite);
  replace(document.getElementById('who'), `${who.name} (${who.scope})`);
  document.getElementById('logout').hidden = !api.token();
}

async function whoami() {
  const who = await api.get('whoami');
  setScope(who);
}

function askToken(message) {
  const d = document.getElementById('login');
  document.getElementById('login-error').textContent = message || '';
  if (!d.open) d.showModal();
  document.getElementById('login-token').focus();
}

async function route() {
  if (current && current.stop) current.stop();
  clearTimeout(pollTimer);
  const hash = location.hash || '#/overview';
  const main = document.getElementById('main');
  for (const [re, mod, nav] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    replace(main);
    const args = m.slice(1).map(x => (x === undefined ? x : decodeURIComponent(x)));
    const page = {mod, args, stopped: false};
    current = page;
    try {
      page.view = await mod.render(main, args, session);
    } catch (e) {
      if (e.status !== 401) replace(main, h('p', {class: 'error'}, 'Cannot load this page: ' + e.message));
      return;
    }
    page.stop = () => { page.stopped = true; if (page.view && page.view.stop) page.view.stop(); };
    // A page that said done (an ended run) and changes again (a rerun reopens the run) asks
    // for its refresh back.
    if (page.view) page.view.rearm = () => { if (!page.stopped && current === page) schedulePoll(page); };
    schedulePoll(page);
    return;
  }
  location.hash = '#/overview';
}

function schedulePoll(page) {
  // A page whose data can no longer change (a finished run) says so with done.
  if (!page.view || !page.view.refresh || page.view.done) return;
  clearTimeout(pollTimer);
  pollTimer = setTimeout(async () => {
    if (page.stopped || current !== page) return;
    if (!document.hidden && !refreshPaused()) {
      try {
        await keepFocus(() => page.view.refresh());
        // How many automatic refreshes this tab has done: tests and the curious read it.
        document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
      } catch (e) { if (e.status !== 401) showStale(e); }
    }
    schedulePoll(page);
  }, pollMS());
}

// keepFocus runs a refresh and, should it have replaced the element that had the focus,
// gives the focus (and the caret) back to its replacement, found by id or data-key. Pages
// update their inputs in place; this is the net under them.
async function keepFocus(fn) {
  const el = document.activeElement;
  const id = el && el !== document.body ? el.id : '';
  const key = el && el.dataset ? el.dataset.key : '';
  let sel = null;
  try { sel = el && typeof el.selectionStart === 'number' ? [el.selectionStart, el.selectionEnd] : null; } catch { sel = null; }
  await fn();
  if (!el || el.isConnected || (!id && !key)) return;
  const again = id ? document.getElementById(id) : document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (!again) return;
  again.focus();
  if (sel) { try { again.setSelectionRange(sel[0], sel[1]); } catch { /* not a text field */ } }
}

// navToggle wires the phone's Menu button: on a narrow screen the nav and the header's
// preferences fold behind it, and following a link folds them again.
function navToggle() {
  const btn = document.getElementById('nav-toggle');
  const set = open => {
    document.body.classList.toggle('nav-open', open);
    btn.setAttribute('aria-expanded', open ? 'true' : 'false');
  };
  btn.addEventListener('click', () => set(!document.body.classList.contains('nav-open')));
  window.addEventListener('hashchange', () => set(false));
}

// prefs wires the header's time zone, refresh interval and pause controls.
function prefs() {
  const zone = document.getElementById('zone');
  replace(zone, ZONE_MODES.map(([v, label]) => h('option', {value: v}, label)));
  zone.value = zoneMode();
  zone.addEventListener('change', () => { setZoneMode(zone.value); route(); });
  const every = document.getElementById('refresh-every');
  replace(every, REFRESH_CHOICES.map(([ms, label]) => h('option', {value: String(ms)}, label)));
  every.value = String(pollMS());
  every.addEventListener('change', () => {
    localStorage.setItem(REFRESH_KEY, every.value);
    if (current) schedulePoll(current);
  });
  const toggle = document.getElementById('refresh-toggle');
  const show = () => {
    const p = refreshPaused();
    toggle.textContent = p ? 'Resume' : 'Pause';
    toggle.setAttribute('aria-pressed', p ? 'true' : 'false');
    toggle.title = p ? 'Automatic refresh is paused' : 'Pause automatic refresh';
    document.body.classList.toggle('refresh-paused', p);
  };
  toggle.addEventListener('click', () => {
    localStorage.setItem(PAUSED_KEY, refreshPaused() ? '0' : '1');
    show();
    if (!refreshPaused() && current) reload().catch(e => showStale(e));
  });
  show();
}

function showStale(e) {
  const b = document.getElementById('banner');
  if (b.dataset.kind === 'backup') return;
  b.hidden = false;
  b.dataset.kind = 'stale';
  replace(b, 'Cannot refresh: ' + e.message + '. What is shown may be out of date.');
}

function clearStale() {
  const b = document.getElementById('banner');
  if (b.dataset.kind === 'stale') { b.hidden = true; b.dataset.kind = ''; }
}

export async function reload() {
  if (current && current.view && current.view.refresh) {
    await current.view.refresh();
    clearStale();
  }
}

async function nodeBadge() {
  const r = await api.readyz();
  const el = document.getElementById('node');
  replace(el, api.roleText(r));
  el.dataset.role = r.role || (r.ok ? 'single' : r.httpStatus === 503 ? 'down' : 'unknown');
  backupBanner(r.role === 'backup' ? r.primary : null);
}

// backupBanner says, on a backup, where its writes go: the backup passes the console's
// writes on to the primary (primary is its advertise URL, "" when no node holds the lease).
// null clears it.
function backupBanner(primary) {
  const b = document.getElementById('banner');
  if (primary === null) {
    if (b.dataset.kind === 'backup') { b.hidden = true; b.dataset.kind = ''; }
    return;
  }
  b.hidden = false;
  b.dataset.kind = 'backup';
  if (primary) {
    replace(b, 'This node is a backup: it reads from the shared database, and passes writes on to the primary at ',
      h('a', {href: primary, id: 'banner-primary'}, primary), '.');
  } else {
    replace(b, 'This node is a backup and no node holds the lease: writes fail until one takes over.');
  }
}

function start() {
  prefs();
  navToggle();
  api.on('unauthorized', () => askToken(api.token() ? 'The token was refused.' : ''));
  api.on('backup', data => backupBanner(data.primary || ''));
  document.getElementById('login-form').addEventListener('submit', async ev => {
    ev.preventDefault();
    api.setToken(document.getElementById('login-token').value.trim());
    try {
      await whoami();
      document.getElementById('login').close();
      route();
    } catch (e) {
      document.getElementById('login-error').textContent = e.status === 401 ? 'The token was refused.' : e.message;
    }
  });
  document.getElementById('login').addEventListener('cancel', ev => ev.preventDefault());
  document.getElementById('logout').addEventListener('click', () => { api.setToken(''); location.reload(); });
  window.addEventListener('hashchange', route);
  // The page renders at once; whoami's answer only hides the write controls of a read token
  // when it comes (a 401 from either asks for the token, and the login routes again).
  route();
  whoami().catch(e => { if (e.status !== 401) toast('Cannot reach axe: ' + e.message, 'error'); });
  nodeBadge();
  setInterval(nodeBadge, 10000);
}

start();
