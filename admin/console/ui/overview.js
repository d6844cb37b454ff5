// Overview: this node's role, executors, open breakers, the tasks failing now (a link to
// them), fires and failures per minute over the last hour (counters in memory), and the
// day-long chart of fires, failures and lateness per minute kept in the store.
import * as api from './api.js';
import {h, svg, update, table} from './dom.js';
import {show} from './time.js';

// RANGES are the quick time ranges of the history views.
export const RANGES = [['15m', '15 min', 15 * 60000], ['1h', '1 h', 3600000], ['24h', '24 h', 86400000], ['168h', '7 d', 7 * 86400000]];

// minuteRuns is the Runs list of the runs scheduled in the minute that starts at at (ms).
export function minuteRuns(at) { return '#/runs?' + new URLSearchParams({from: String(at), to: String(at + 60000)}).toString(); }

export async function render(main) {
  const cards = h('div', {class: 'cards', id: 'overview-cards'});
  const chart = h('figure', {class: 'chart', id: 'overview-chart'});
  const day = h('figure', {class: 'chart', id: 'overview-day'});
  // Triage: the window's failures grouped by task and by error text.
  let within = '1h';
  const rangeBtns = RANGES.map(([v, label]) => h('button', {type: 'button', class: 'range', dataset: {range: v},
    'aria-pressed': v === within ? 'true' : 'false', onclick: () => { within = v; triageAge = 0; loadTriage(); }}, label));
  const triageBox = h('div', {id: 'triage', class: 'cols'});
  const triageNote = h('p', {class: 'muted', id: 'triage-note'});
  main.append(h('h1', {}, 'Overview'), cards,
    h('section', {'aria-labelledby': 'triage-h'}, h('h2', {id: 'triage-h'}, 'Failures by task and by error'),
      h('div', {class: 'row ranges', role: 'group', 'aria-label': 'Time range'}, 'Last ', rangeBtns), triageNote, triageBox),
    h('section', {'aria-labelledby': 'chart-h'}, h('h2', {id: 'chart-h'}, 'Fires and failures per minute, last hour'), chart),
    h('section', {'aria-labelledby': 'day-h'}, h('h2', {id: 'day-h'}, 'Fires, failures and lateness per minute, last 24 hours (every node, kept in the store)'), day));
  const card = (label, value, id, bad, href) => {
    const body = [h('div', {class: 'label'}, label), h('div', {class: 'value'}, value)];
    return href ? h('a', {class: 'card link-card' + (bad ? ' bad' : ''), id, href}, body) : h('div', {class: 'card' + (bad ? ' bad' : ''), id}, body);
  };
  const countOf = q => api.get('tasks', {...q, limit: 1, total: 1}).then(r => (r.total_more ? r.total.toLocaleString('en') + '+' : String(r.total)), () => '?');

  // The triage reads up to 20,000 runs: it is read again every fifth refresh, not each one.
  let triageAge = 0;
  async function loadTriage() {
    for (const b of rangeBtns) b.setAttribute('aria-pressed', b.dataset.range === within ? 'true' : 'false');
    const r = await api.get('triage', {within});
    const ms = RANGES.find(x => x[0] === within)[2];
    const runsOf = extra => '#/runs?' + new URLSearchParams({result: 'failure', from: String(Date.now() - ms), ...extra}).toString();
    update(triageNote, `${r.failures.toLocaleString('en')} failure(s) in the last ${RANGES.find(x => x[0] === within)[1]}` +
      (r.complete ? '.' : `, among the newest ${r.examined.toLocaleString('en')} runs examined.`),
      ' ', h('a', {href: runsOf({}), id: 'triage-runs'}, 'See them in the runs list'));
    triageNote.dataset.failures = String(r.failures);
    const ticket = g => h('a', {class: 'mono', href: '#/run/' + encodeURIComponent(g.last_ticket)}, show(g.last_at));
    update(triageBox,
      h('div', {}, h('h3', {}, 'By task'), r.by_task.length ? table(['Task', 'Failures', 'Newest', 'Its error'], r.by_task.slice(0, 20).map(g =>
        h('tr', {dataset: {task: g.key}}, h('td', {}, h('a', {href: '#/tasks/' + encodeURIComponent(g.key)}, g.key)),
          h('td', {class: 'num'}, h('a', {href: runsOf({task: g.key})}, String(g.count))), h('td', {class: 'time'}, ticket(g)),
          h('td', {class: 'pre'}, g.last_error))), {id: 'triage-tasks'}) : h('p', {class: 'muted', id: 'triage-tasks'}, 'No failure.')),
      h('div', {}, h('h3', {}, 'By error'), r.by_error.length ? table(['Error', 'Failures', 'Tasks', 'Newest'], r.by_error.slice(0, 20).map(g =>
        h('tr', {dataset: {key: 'err:' + g.key}}, h('td', {class: 'pre'}, g.key), h('td', {class: 'num'}, String(g.count)),
          h('td', {}, g.tasks.map((t, i) => [i ? ', ' : '', h('a', {href: '#/tasks/' + encodeURIComponent(t)}, t)]),
            g.task_count > g.tasks.length ? ` and ${g.task_count - g.tasks.length} more` : ''),
          h('td', {class: 'time'}, ticket(g)))), {id: 'triage-errors'}) : h('p', {class: 'muted', id: 'triage-errors'}, 'No failure.')));
  }

  let dayAt = 0;
  async function load() {
    if (triageAge++ % 5 === 0) await loadTriage();
    // failed_within is served by an index (idx_task_runtime_failed): cheap at any size.
    const [o, r, failing] = await Promise.all([api.get('overview'), api.readyz(), countOf({failed_within: '1h'})]);
    const role = api.roleText(r);
    const others = Array.isArray(r.nodes) ? r.nodes.filter(n => n.node !== o.node) : null;
    update(cards,
      card('Tasks failing in the last hour', failing, 'ov-failing', failing !== '0', '#/tasks?failed_within=1h&sort=failed'),
      card('Breakers open', o.breakers_open, 'ov-breakers', o.breakers_open > 0, '#/tasks?breaker=open'),
      card('Executors alive', o.executors_alive, 'ov-alive', false, '#/executors'),
      card('Executors lost', o.executors_lost, 'ov-lost', o.executors_lost > 0, '#/executors'),
      card('Role', role, 'ov-role', !r.ok, '#/nodes'),
      card('Node', o.node || '—', 'ov-node'),
      card('Other nodes', others ? (others.map(n => `${n.node} (${n.role || '?'})`).join(', ') || 'none') : (r.role ? 'not listed by /readyz' : 'none (single node)'), 'ov-nodes'),
      card('Tasks in memory', o.tasks_in_memory, 'ov-mem'),
      card('Version', o.version, 'ov-version'));
    drawChart(o.minutes);
    // The day chart changes once a minute.
    const minute = Math.floor(Date.now() / 60000);
    if (minute !== dayAt) {
      dayAt = minute;
      drawDay((await api.get('stats/minutes', {hours: 24})).minutes);
    }
  }

  function drawChart(pts) {
    const W = 600, H = 140, pad = 24;
    const max = Math.max(1, ...pts.map(p => p.fires), ...pts.map(p => p.failures));
    const bw = (W - pad) / pts.length;
    const y = v => H - pad - (v / max) * (H - 2 * pad);
    // Each minute is a link to the runs scheduled in it (its whole column, so a minute
    // without fires can be opened too).
    const bars = pts.map((p, i) => svg('a', {href: minuteRuns(p.at), class: 'minute', 'data-minute': String(p.at),
      'aria-label': `${show(p.at)}: ${p.fires} fires, ${p.failures} failures; open its runs`},
    svg('rect', {x: pad + i * bw, y: pad / 2, width: Math.max(1, bw), height: H - pad - pad / 2, class: 'hit'}),
    svg('rect', {x: pad + i * bw, y: y(p.fires), width: Math.max(1, bw - 1), height: H - pad - y(p.fires), class: 'bar'}),
    svg('title', {}, `${show(p.at)}: ${p.fires} fires, ${p.failures} failures (click: its runs)`)));
    // A time axis: a tick every 15 minutes.
    const ticks = [];
    pts.forEach((p, i) => {
      if (Math.floor(p.at / 60000) % 15 === 0) ticks.push(svg('text', {x: pad + i * bw, y: H - 8, class: 'tick'}, show(p.at).slice(11, 16)));
    });
    const line = pts.map((p, i) => `${i ? 'L' : 'M'}${pad + i * bw + bw / 2},${y(p.failures)}`).join(' ');
    const total = pts.reduce((a, p) => a + p.fires, 0), fails = pts.reduce((a, p) => a + p.failures, 0);
    update(chart,
      svg('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${total} fires and ${fails} failures in the last hour`, class: 'spark'},
        svg('line', {x1: pad, y1: H - pad, x2: W, y2: H - pad, class: 'axis'}),
        svg('text', {x: 0, y: pad, class: 'tick'}, String(max)), svg('text', {x: 0, y: H - pad, class: 'tick'}, '0'),
        ...ticks, ...bars, svg('path', {d: line, class: 'fail'})),
      h('figcaption', {id: 'chart-caption'}, `Bars: fires (${total}); line: failures (${fails}). One bar per minute, ending ${show(pts[pts.length - 1].at)}; click a minute for its runs.`));
  }

  function drawDay(pts) {
    const W = 900, H = 180, pad = 30, right = 40;
    const max = Math.max(1, ...pts.map(p => p.fires));
    const lateMax = Math.max(1, ...pts.map(p => p.late_avg_ms));
    const x = i => pad + (i / Math.max(1, pts.length - 1)) * (W - pad - right);
    const y = v => H - pad - (v / max) * (H - 2 * pad);
    const yl = v => H - pad - (v / lateMax) * (H - 2 * pad);
    const area = `M${x(0)},${H - pad} ` + pts.map((p, i) => `L${x(i)},${y(p.fires)}`).join(' ') + ` L${x(pts.length - 1)},${H - pad} Z`;
    const fail = pts.map((p, i) => `${i ? 'L' : 'M'}${x(i)},${y(p.failures)}`).join(' ');
    const late = pts.map((p, i) => `${i ? 'L' : 'M'}${x(i)},${yl(p.late_avg_ms)}`).join(' ');
    const total = pts.reduce((a, p) => a + p.fires, 0), fails = pts.reduce((a, p) => a + p.failures, 0);
    const ticks = [];
    for (let i = 0; i < pts.length; i += 360) {
      ticks.push(svg('text', {x: x(i), y: H - 8, class: 'tick'}, show(pts[i].at).slice(11, 16)));
    }
    update(day,
      svg('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${total} fires and ${fails} failures in the last 24 hours`, class: 'spark'},
        svg('line', {x1: pad, y1: H - pad, x2: W - right, y2: H - pad, class: 'axis'}),
        svg('text', {x: 0, y: pad, class: 'tick'}, String(max)), svg('text', {x: 0, y: H - pad, class: 'tick'}, '0'),
        svg('text', {x: W - right + 4, y: pad, class: 'tick late-tick'}, Math.round(lateMax) + ' ms'),
        ...ticks,
        svg('path', {d: area, class: 'area'}), svg('path', {d: fail, class: 'fail'}), svg('path', {d: late, class: 'late'})),
      h('figcaption', {id: 'day-caption'}, `Area: fires (${total.toLocaleString('en')}); red: failures (${fails.toLocaleString('en')}); dashed: mean lateness of the minute's fires (right scale). ` +
        `${pts.length} minutes, ${show(pts[0].at)} to ${show(pts[pts.length - 1].at)}.`));
    day.dataset.fires = String(total);
    day.dataset.first = String(pts[0].at);
    dayPts = pts;
  }

  // A click on the day chart opens the runs of the minutes under the pointer. A pixel spans
  // more than one of the day's 1,440 minutes on most screens, and picking one of them would
  // hide the runs of the others (a guess that is wrong whenever the pixel's edge falls between
  // two minutes), so the Runs list opens on every minute the clicked pixel covers.
  let dayPts = [];
  day.addEventListener('click', ev => {
    const el = day.querySelector('svg');
    if (!el || !dayPts.length) return;
    const box = el.getBoundingClientRect();
    const W = 900, pad = 30, right = 40;
    const at = px => (((px - box.left) * (W / box.width) - pad) / (W - pad - right)) * Math.max(1, dayPts.length - 1);
    // The pixel [clientX-0.5, clientX+0.5) covers the minutes whose points fall in it; at least
    // the nearest minute.
    const mid = Math.round(at(ev.clientX));
    if (mid < 0 || mid >= dayPts.length) return;
    const lo = Math.max(0, Math.min(mid, Math.ceil(at(ev.clientX - 0.5))));
    const hi = Math.min(dayPts.length - 1, Math.max(mid, Math.ceil(at(ev.clientX + 0.5)) - 1));
    location.hash = '#/runs?' + new URLSearchParams({from: String(dayPts[lo].at), to: String(dayPts[hi].at + 60000)}).toString();
  });

  await load();
  return {refresh: load};
}
