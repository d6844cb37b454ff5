// The API client. The API lives beside the console (<base>/api/v1/), so a reverse-proxy
// prefix needs nothing here. The token is kept in sessionStorage: for this tab only, gone
// when it closes.

const apiBase = new URL('api/v1/', document.baseURI);
const TOKEN_KEY = 'axe.token';

export class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); }

// listeners for 401 (ask for a token) and a backup that cannot reach the primary.
const hooks = {unauthorized: () => {}, backup: () => {}};
export function on(name, fn) { hooks[name] = fn; }

// The last answer of each GET address with its ETag, the oldest dropped past ETAG_MAX.
const ETAG_MAX = 200;
const etags = new Map();
const unchangedAnswers = new WeakSet();

// unchanged says whether data is an answer the server said had not changed (304) since
// the console last read it: a page may then leave what it shows alone.
export function unchanged(data) { return !!data && typeof data === 'object' && unchangedAnswers.has(data); }

// call sends one API request; a JSON body when body is given.
export async function call(method, path, body, query) {
  const url = new URL(path.replace(/^\//, ''), apiBase);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const headers = {'Accept': 'application/json', 'X-Axe-Actor': 'console'};
  if (token()) headers['Authorization'] = 'Bearer ' + token();
  // A backup passes writes marked so on to the primary, with this token and actor, and
  // answers with the primary's answer (docs/operations.md); a primary ignores the mark.
  if (method !== 'GET' && method !== 'HEAD') headers['X-Axe-Forward'] = 'primary';
  // A GET the console has an answer for asks whether it changed (If-None-Match): an
  // unchanged list is answered 304 with no body, so an idle tab costs the server a hash.
  const key = method === 'GET' ? url.toString() : '';
  const had = key ? etags.get(key) : undefined;
  if (had) headers['If-None-Match'] = had.etag;
  const init = {method, headers, cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(url, init);
  if (res.status === 304 && had) {
    unchangedAnswers.add(had.data);
    return had.data;
  }
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  const etag = res.headers.get('ETag');
  if (key && res.ok && etag && data && typeof data === 'object') {
    if (etags.size >= ETAG_MAX) etags.delete(etags.keys().next().value);
    etags.set(key, {etag, data});
  } else if (key) etags.delete(key);
  if (!res.ok) {
    const err = new APIError(res.status, data);
    if (res.status === 401) hooks.unauthorized(err);
    // A backup that could not pass a write on: no primary holds the lease (503), or the
    // primary it names does not answer (502).
    if ((res.status === 503 || res.status === 502) && data && 'primary' in data) hooks.backup(data);
    throw err;
  }
  return data;
}

export const get = (p, q) => call('GET', p, undefined, q);
export const post = (p, b) => call('POST', p, b === undefined ? {} : b);

// enc escapes one path segment (task names may hold ':' and '.').
export const enc = s => encodeURIComponent(s);

// readyz reads the root /readyz (it stays at the root under --base-path). It answers the
// role and epoch on a highly available axe; on a single node it has only "status".
export async function readyz() {
  try {
    const res = await fetch(new URL('/readyz', location.origin), {headers: {'Accept': 'application/json'}});
    const data = await res.json().catch(() => ({}));
    return {ok: res.ok, httpStatus: res.status, ...data};
  } catch (e) {
    return {ok: false, httpStatus: 0, error: String(e)};
  }
}

// roleText says what /readyz told about this node, without guessing: a role when it names
// one, "single node" when it is ready without one, "not ready" with its reason on 503, and
// "role unknown" when /readyz cannot be reached (e.g. a proxy that forwards only the prefix).
export function roleText(r) {
  if (r.role) return r.role + (r.epoch !== undefined ? ' · epoch ' + r.epoch : '');
  if (r.ok) return 'single node';
  if (r.httpStatus === 503) return 'not ready' + (r.error ? ': ' + r.error : '');
  return 'role unknown';
}

// bulk applies action ("pause", "resume", "run", "delete") to the tasks the selector picks,
// in one POST tasks/bulk/{action}: a selection is {"names": [...]}, "all matching the
// filter" is the filter's {"group", "name_prefix", "state"}. With dryRun the server counts
// and changes nothing. Resolves to how many tasks were (or would be) affected.
export async function bulk(action, selector, dryRun) {
  const data = await call('POST', `tasks/bulk/${enc(action)}`, selector, dryRun ? {dry_run: 'true'} : undefined);
  return data.affected;
}
