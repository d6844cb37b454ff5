// Times are shown in a named zone with its UTC offset ("2026-03-08 03:00:00 −04:00
// America/New_York"), never in the browser's zone unlabelled.

const fmtCache = new Map();

function formatter(zone) {
  let f = fmtCache.get(zone);
  if (!f) {
    try {
      f = new Intl.DateTimeFormat('en-GB', {timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit',
        hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23', timeZoneName: 'longOffset'});
    } catch {
      f = formatter('UTC');
    }
    fmtCache.set(zone, f);
  }
  return f;
}

// offsetOf returns "+02:00" for ms in zone.
export function offsetOf(ms, zone) {
  const p = formatter(zone).formatToParts(new Date(ms)).find(x => x.type === 'timeZoneName');
  const v = p ? p.value.replace('GMT', '') : '';
  return v === '' ? '+00:00' : v;
}

// fmtTime formats Unix ms in zone as "YYYY-MM-DD HH:MM:SS +HH:MM", or "—" for none.
export function fmtTime(ms, zone) {
  if (!ms) return '—';
  const parts = {};
  for (const p of formatter(zone || 'UTC').formatToParts(new Date(ms))) parts[p.type] = p.value;
  const off = (parts.timeZoneName || 'GMT').replace('GMT', '') || '+00:00';
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second} ${off}`;
}

// fmtZoned is fmtTime with the zone's name after it.
export function fmtZoned(ms, zone) {
  if (!ms) return '—';
  return fmtTime(ms, zone) + ' ' + (zone || 'UTC');
}

// fmtDuration formats milliseconds as 850 ms, 3.2 s, 4 m 10 s.
export function fmtDuration(ms) {
  if (ms === undefined || ms === null || ms < 0) return '—';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  const m = Math.floor(ms / 60000), s = Math.round((ms % 60000) / 1000);
  return `${m} m ${s} s`;
}

// ago says how long before now ms was.
export function ago(ms, now) {
  if (!ms) return 'never';
  const d = Math.max(0, (now || Date.now()) - ms);
  if (d < 1000) return 'just now';
  return fmtDuration(d) + ' ago';
}

// zones lists the IANA zones the browser knows, UTC first.
export function zones() {
  let z = [];
  try { z = Intl.supportedValuesOf('timeZone'); } catch { z = []; }
  return ['UTC', ...z.filter(x => x !== 'UTC')];
}

// The zone every time of the console is shown in: "utc", "browser" or "task" (each task's
// own zone; pages about no task then show UTC). Chosen in the header, kept in localStorage.
const ZONE_KEY = 'axe.zone';
export const ZONE_MODES = [['utc', 'UTC'], ['browser', 'Browser'], ['task', 'Task zone']];

export function zoneMode() {
  const m = localStorage.getItem(ZONE_KEY);
  return ZONE_MODES.some(([k]) => k === m) ? m : 'utc';
}

export function setZoneMode(m) { localStorage.setItem(ZONE_KEY, m); }

export function browserZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'; } catch { return 'UTC'; }
}

// zoneFor is the zone a time about a task in taskZone is shown in ('' or undefined: a time
// about no task).
export function zoneFor(taskZone) {
  const m = zoneMode();
  if (m === 'browser') return browserZone();
  if (m === 'task' && taskZone) return taskZone;
  return 'UTC';
}

// show formats ms in the chosen zone, with the zone's name: one call for every time shown.
export function show(ms, taskZone) { return fmtZoned(ms, zoneFor(taskZone)); }

// parseLocal reads a datetime-local value ("2026-03-08T02:30") as a time in zone, to Unix ms.
export function parseLocal(value, zone) {
  const m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d))?$/.exec(value || '');
  if (!m) return 0;
  const wall = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
  // The zone's offset at that wall time, found from the offset at a first guess.
  let t = wall;
  for (let i = 0; i < 2; i++) t = wall - offsetMS(t, zone);
  return t;
}

function offsetMS(ms, zone) {
  const o = offsetOf(ms, zone);
  const m = /^([+-−])(\d\d):(\d\d)/.exec(o);
  if (!m) return 0;
  const v = (+m[2] * 60 + +m[3]) * 60000;
  return m[1] === '+' ? v : -v;
}

// toLocal is the datetime-local value of ms in zone.
export function toLocal(ms, zone) {
  const s = fmtTime(ms, zone);
  return s === '—' ? '' : s.slice(0, 16).replace(' ', 'T');
}
