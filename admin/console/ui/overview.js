// Overview: this node's role, executors, open breakers, and fires and failures per minute
// over the last hour, from counters the server keeps in memory.
import * as api from './api.js';
import {h, svg, replace} from './dom.js';
import {fmtZoned} from './time.js';

export async function render(main) {
  const cards = h('div', {class: 'cards', id: 'overview-cards'});
  const chart = h('figure', {class: 'chart', id: 'overview-chart'});
  main.append(h('h1', {}, 'Overview'), cards,
    h('section', {'aria-labelledby': 'chart-h'}, h('h2', {id: 'chart-h'}, 'Fires and failures per minute, last hour'), chart));
  const card = (label, value, id, bad) => h('div', {class: 'card' + (bad ? ' bad' : ''), id}, h('div', {class: 'label'}, label), h('div', {class: 'value'}, value));

  async function load() {
    const [o, r] = await Promise.all([api.get('overview'), api.readyz()]);
    const role = api.roleText(r);
    const others = Array.isArray(r.nodes) ? r.nodes.filter(n => n.node !== o.node) : null;
    replace(cards,
      card('Role', role, 'ov-role', !r.ok),
      card('Node', o.node || '—', 'ov-node'),
      card('Other nodes', others ? (others.map(n => `${n.node} (${n.role || '?'})`).join(', ') || 'none') : (r.role ? 'not listed by /readyz' : 'none (single node)'), 'ov-nodes'),
      card('Executors alive', o.executors_alive, 'ov-alive'),
      card('Executors lost', o.executors_lost, 'ov-lost', o.executors_lost > 0),
      card('Breakers open', o.breakers_open, 'ov-breakers', o.breakers_open > 0),
      card('Tasks in memory', o.tasks_in_memory, 'ov-mem'),
      card('Version', o.version, 'ov-version'));
    drawChart(o.minutes);
  }

  function drawChart(pts) {
    const W = 600, H = 140, pad = 24;
    const max = Math.max(1, ...pts.map(p => p.fires), ...pts.map(p => p.failures));
    const bw = (W - pad) / pts.length;
    const y = v => H - pad - (v / max) * (H - 2 * pad);
    const bars = pts.map((p, i) => svg('rect', {x: pad + i * bw, y: y(p.fires), width: Math.max(1, bw - 1), height: H - pad - y(p.fires), class: 'bar'},
      svg('title', {}, `${fmtZoned(p.at, 'UTC')}: ${p.fires} fires, ${p.failures} failures`)));
    const line = pts.map((p, i) => `${i ? 'L' : 'M'}${pad + i * bw + bw / 2},${y(p.failures)}`).join(' ');
    const total = pts.reduce((a, p) => a + p.fires, 0), fails = pts.reduce((a, p) => a + p.failures, 0);
    replace(chart,
      svg('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${total} fires and ${fails} failures in the last hour`, class: 'spark'},
        svg('line', {x1: pad, y1: H - pad, x2: W, y2: H - pad, class: 'axis'}),
        svg('text', {x: 0, y: pad, class: 'tick'}, String(max)), svg('text', {x: 0, y: H - pad, class: 'tick'}, '0'),
        ...bars, svg('path', {d: line, class: 'fail'})),
      h('figcaption', {id: 'chart-caption'}, `Bars: fires (${total}); line: failures (${fails}). One bar per minute, ending ${fmtZoned(pts[pts.length - 1].at, 'UTC')}.`));
  }

  await load();
  return {refresh: load};
}
