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

const routes = [
  [/^#\/overview$/, overview, 'overview'],
  [/^#\/tasks(?:\?(.*))?$/, tasks, 'tasks'],
  [/^#\/new$/, form, 'new'],
  [/^#\/tasks\/([^/?]+)\/edit$/, form, 'tasks'],
  [/^#\/tasks\/([^/?]+)$/, task, 'tasks'],
  [/^#\/executors$/, executors, 'executors'],
  [/^#\/groups$/, groups, 'groups'],
];

// POLL_MS is how often a page reloads its data.
const POLL_MS = 2000;

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
    schedulePoll(page);
    return;
  }
  location.hash = '#/overview';
}

function schedulePoll(page) {
  if (!page.view || !page.view.refresh) return;
  pollTimer = setTimeout(async () => {
    if (page.stopped || current !== page) return;
    if (!document.hidden) {
      try { await page.view.refresh(); } catch (e) { if (e.status !== 401) showStale(e); }
    }
    schedulePoll(page);
  }, POLL_MS);
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
  whoami().then(route, e => { if (e.status !== 401) toast('Cannot reach axe: ' + e.message, 'error'); });
  nodeBadge();
  setInterval(nodeBadge, 10000);
}

start();
