// One workflow run (GET /api/v1/workflow-runs/{id}): the DAG of its steps, laid out by dagre
// (vendor/dagre.esm.js) and drawn here as SVG, each step a box coloured by its state with its
// duration and a fan-out's item counts, edges from needs; a Gantt of the steps from
// started_at to ended_at on the run's time axis; each step's inputs (its needs' outputs), its
// output and error, and its attempts by ticket; and the actions: cancel the run, rerun it
// from the failed steps, rerun a step and what follows it, mark a failed step succeeded with
// an output, kill a running attempt by its ticket.
// A refresh redraws in place (dom.update, the SVG too), and nothing when the answer is
// unchanged (304) and nothing runs; the mark-succeeded form is built once, so a refresh
// never takes what is being typed. A run that ended stops refreshing until an action
// reopens it.
import * as api from './api.js';
import {h, svg, update, table, toast, confirmAction, confirmWithNote} from './dom.js';
import {show, fmtDuration} from './time.js';
import {graphlib, layout} from './vendor/dagre.esm.js';
import {wfState, runDuration} from './workflows.js';
import {killRun} from './run.js';

const NODE_W = 176;
const NODE_H = 58;
// An input or output longer than this is shown collapsed, and at most SHOW_MAX of it.
const LONG_CHARS = 600;
const LONG_LINES = 12;
const SHOW_MAX = 64 * 1024;
const ATTEMPTS_MAX = 100;
const ENDED = new Set(['succeeded', 'failed', 'cancelled']);
const MARKABLE = new Set(['failed', 'skipped', 'cancelled']);

// clipName fits a step's name in a box; the whole name is the box's title.
function clipName(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }

// stepSpan is how long a step ran: from its first attempt's start to its last end, to now
// while it runs.
function stepSpan(s, now) {
  if (!s.started_at) return '';
  if (s.state === 'running') return fmtDuration(Math.max(0, now - s.started_at));
  return s.ended_at ? fmtDuration(Math.max(0, s.ended_at - s.started_at)) : '';
}

// itemsText is a fan-out's counts: "3 ok · 1 failed · 1 running of 5".
function itemsText(s) {
  if (!s.items) return '';
  const parts = [`${s.succeeded || 0} ok`];
  if (s.failed) parts.push(`${s.failed} failed`);
  if (s.running) parts.push(`${s.running} running`);
  return parts.join(' · ') + ` of ${s.items}`;
}

function phone() { return window.matchMedia('(max-width: 700px)').matches; }

// place lays the steps out with dagre, left to right (top to bottom on a phone); the
// positions are kept while the steps, their needs and the direction stay the same.
let placed = {key: '', g: null};
function place(steps) {
  const dir = phone() ? 'TB' : 'LR';
  const key = dir + '|' + steps.map(s => s.name + '<' + (s.needs || []).join(',')).join('|');
  if (placed.key === key) return placed.g;
  const g = new graphlib.Graph();
  g.setGraph({rankdir: dir, nodesep: 20, ranksep: dir === 'LR' ? 56 : 36, marginx: 8, marginy: 8});
  g.setDefaultEdgeLabel(() => ({}));
  for (const s of steps) g.setNode(s.name, {width: NODE_W, height: NODE_H});
  for (const s of steps) for (const n of s.needs || []) g.setEdge(n, s.name);
  layout(g);
  placed = {key, g};
  return g;
}

// dag draws the run's steps as an SVG: boxes coloured by state, edges from needs.
function dag(steps, now, onPick) {
  const g = place(steps);
  const gr = g.graph();
  const W = Math.ceil(gr.width || NODE_W + 16), H = Math.ceil(gr.height || NODE_H + 16);
  const edges = g.edges().map(e => {
    const pts = g.edge(e).points || [];
    const d = pts.map((p, i) => `${i ? 'L' : 'M'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ');
    return svg('path', {class: 'dag-edge', d, 'marker-end': 'url(#dag-arrow)', 'data-key': 'e:' + e.v + '>' + e.w,
      'data-from': e.v, 'data-to': e.w});
  });
  const nodes = steps.map(s => {
    const n = g.node(s.name);
    const x = n.x - NODE_W / 2, y = n.y - NODE_H / 2;
    const second = [s.state, stepSpan(s, now)].filter(Boolean).join(' · ');
    const node = svg('g', {class: 'dag-node step-' + s.state, transform: `translate(${x.toFixed(1)},${y.toFixed(1)})`,
      tabindex: 0, role: 'button', 'data-key': 'n:' + s.name, 'data-step': s.name, 'data-state': s.state,
      'aria-label': `step ${s.name}: ${second}${s.items ? ', ' + itemsText(s) : ''}`},
    svg('title', {}, s.name),
    svg('rect', {width: NODE_W, height: NODE_H, rx: 6, ry: 6}),
    svg('text', {x: 10, y: 18, class: 'dag-name'}, clipName(s.name, 22)),
    svg('text', {x: 10, y: 34, class: 'dag-sub'}, second),
    s.items ? svg('text', {x: 10, y: 50, class: 'dag-items'}, itemsText(s)) : null);
    node.addEventListener('click', () => onPick(s.name));
    node.addEventListener('keydown', ev => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); onPick(s.name); } });
    return node;
  });
  return svg('svg', {class: 'dag', id: 'wf-dag-svg', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
    'aria-label': `The run's ${steps.length} steps and the needs between them`},
  svg('defs', {}, svg('marker', {id: 'dag-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto'},
    svg('path', {d: 'M0,0 L10,5 L0,10 z', class: 'dag-arrow'}))),
  svg('g', {class: 'dag-edges'}, edges), svg('g', {class: 'dag-nodes'}, nodes));
}

// gantt draws each step as a bar from its start to its end (to now while it runs) on the
// run's time axis, with ticks in seconds from the first start.
function gantt(steps, now, width) {
  const starts = steps.filter(s => s.started_at).map(s => s.started_at);
  if (!starts.length) return h('p', {class: 'muted', id: 'wf-gantt-svg'}, 'No step has started yet.');
  const t0 = Math.min(...starts);
  const t1 = Math.max(t0 + 1, ...steps.filter(s => s.started_at).map(s => (s.state === 'running' ? now : s.ended_at || now)));
  const W = Math.max(300, Math.floor(width));
  const label = Math.min(180, Math.floor(W * 0.32));
  const rowH = 22, top = 20, plot = W - label - 12;
  const x = t => label + ((t - t0) / (t1 - t0)) * plot;
  const H = top + steps.length * rowH + 6;
  const ticks = [];
  const n = W < 520 ? 2 : 4; // fewer ticks on a phone, so their labels do not run together
  for (let i = 0; i <= n; i++) {
    const t = t0 + ((t1 - t0) * i) / n;
    ticks.push(svg('line', {class: 'gantt-grid', x1: x(t), x2: x(t), y1: top - 4, y2: H - 4}),
      svg('text', {class: 'gantt-tick', x: x(t), y: 12, 'text-anchor': i === 0 ? 'start' : i === n ? 'end' : 'middle'},
        '+' + fmtDuration(Math.round(t - t0))));
  }
  const rows = steps.map((s, i) => {
    const y = top + i * rowH;
    const parts = [svg('text', {class: 'gantt-label', x: 4, y: y + 15}, clipName(s.name, Math.max(8, Math.floor(label / 7.5))))];
    if (s.started_at) {
      const end = s.state === 'running' ? now : s.ended_at || now;
      const bx = x(s.started_at);
      parts.push(svg('rect', {class: 'gantt-bar step-' + s.state, x: bx.toFixed(1), y: y + 4, height: rowH - 8, rx: 2,
        width: Math.max(2, x(end) - bx).toFixed(1), 'data-step': s.name},
      svg('title', {}, `${s.name}: ${s.state}, ${stepSpan(s, now)}`)));
    } else {
      parts.push(svg('text', {class: 'gantt-none', x: label + 4, y: y + 15}, s.state));
    }
    return svg('g', {'data-key': 'gr:' + s.name}, parts);
  });
  return svg('svg', {class: 'gantt', id: 'wf-gantt-svg', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
    'aria-label': 'Each step from its start to its end', 'data-t0': t0},
  svg('g', {}, ticks), rows);
}

// jsonBlock shows JSON pretty, collapsed when long; open remembers what the operator opened
// or closed, by key, across refreshes.
function jsonBlock(key, title, value, open, id) {
  const text = value === undefined ? '' : JSON.stringify(value, null, 2);
  const long = text.length > LONG_CHARS || text.split('\n').length > LONG_LINES;
  const shown = text.length > SHOW_MAX ? text.slice(0, SHOW_MAX) + `\n… (the first ${SHOW_MAX / 1024} KiB of ${text.length.toLocaleString('en')} characters)` : text;
  const isOpen = open.has(key) ? open.get(key) : !long;
  const d = h('details', {dataset: {key, long: String(long)}, open: isOpen, id},
    h('summary', {}, title, long ? h('span', {class: 'muted'}, ` (${text.split('\n').length.toLocaleString('en')} lines)`) : ''),
    h('pre', {class: 'block'}, shown));
  d.addEventListener('toggle', () => open.set(key, d.open));
  return d;
}

export async function render(main, args) {
  const id = args[0];
  const path = 'workflow-runs/' + api.enc(id);
  const open = new Map(); // details key → opened by the operator
  const head = h('div', {class: 'title', id: 'wf-run-title'});
  const actions = h('div', {class: 'actions needs-write', id: 'wf-run-actions'});
  const info = h('div', {id: 'wf-run-info'});
  const dagBox = h('div', {class: 'scroll dag-box', id: 'wf-dag'});
  const legend = h('p', {class: 'legend small'}, ['pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled']
    .map(s => h('span', {class: 'legend-item'}, h('span', {class: 'swatch step-' + s}), s)));
  const ganttBox = h('div', {id: 'wf-gantt', class: 'gantt-box'});
  const stepsBox = h('div', {id: 'wf-run-steps'});

  // Mark a step succeeded: built once (a refresh updates only the step choices).
  const markStep = h('select', {id: 'wf-mark-step', 'aria-label': 'Step to mark succeeded'});
  const markOutput = h('textarea', {id: 'wf-mark-output', rows: 4, class: 'mono', spellcheck: 'false', placeholder: '{"path": "/data/…"}',
    'aria-label': 'Output (JSON) the steps after it get'});
  const markNote = h('input', {id: 'wf-mark-note', type: 'text', maxlength: 1024, placeholder: 'note (why)', 'aria-label': 'Note'});
  const markErr = h('p', {class: 'error', id: 'wf-mark-error', role: 'alert'});
  const markBtn = h('button', {type: 'button', id: 'wf-mark-submit', onclick: markSucceeded}, 'Mark succeeded');
  const markSection = h('section', {'aria-labelledby': 'wf-mark-h', id: 'wf-mark', class: 'needs-write', hidden: true},
    h('h2', {id: 'wf-mark-h'}, 'Mark a step succeeded'),
    h('p', {class: 'hint'}, 'The step is recorded succeeded with this output (empty: none), and the steps after it that did not succeed run with it as their input.'),
    h('div', {class: 'form'},
      h('div', {class: 'field'}, h('label', {for: 'wf-mark-step'}, 'Step'), markStep),
      h('div', {class: 'field'}, h('label', {for: 'wf-mark-output'}, 'Output (JSON)'), markOutput),
      h('div', {class: 'field'}, h('label', {for: 'wf-mark-note'}, 'Note'), markNote),
      markErr, h('div', {class: 'row'}, markBtn)));

  main.append(head, actions,
    h('section', {'aria-labelledby': 'wf-dag-h'}, h('h2', {id: 'wf-dag-h'}, 'Steps'), legend, dagBox),
    h('section', {'aria-labelledby': 'wf-gantt-h'}, h('h2', {id: 'wf-gantt-h'}, 'Timeline'), ganttBox),
    h('section', {'aria-labelledby': 'wf-info-h'}, h('h2', {id: 'wf-info-h'}, 'Run'), info),
    markSection,
    h('section', {'aria-labelledby': 'wf-detail-h'}, h('h2', {id: 'wf-detail-h'}, 'Each step'), stepsBox));

  const view = {refresh: load, done: false};
  let v = null;

  // act runs an action, then reads the run again; a run it reopened refreshes again.
  async function act(label, fn) {
    try {
      await fn();
      toast(label + ': done');
    } catch (e) {
      toast(label + ': ' + e.message, 'error');
      return false;
    }
    await load(true);
    if (!view.done && view.rearm) view.rearm();
    return true;
  }

  function pick(step) {
    const sec = stepsBox.querySelector(`section[data-step="${CSS.escape(step)}"]`);
    if (!sec) return;
    sec.scrollIntoView({block: 'start'});
    sec.classList.add('picked');
    setTimeout(() => sec.classList.remove('picked'), 1500);
  }

  function markFor(step) {
    markStep.value = step;
    markSection.hidden = false;
    markSection.scrollIntoView({block: 'start'});
    markOutput.focus();
  }

  async function markSucceeded() {
    const step = markStep.value;
    const raw = markOutput.value.trim();
    const body = {};
    if (raw) {
      try { body.output = JSON.parse(raw); } catch (e) {
        markErr.textContent = 'output: not valid JSON: ' + e.message;
        markOutput.setAttribute('aria-invalid', 'true');
        return;
      }
    }
    if (markNote.value.trim()) body.note = markNote.value.trim();
    markErr.textContent = '';
    markOutput.setAttribute('aria-invalid', 'false');
    if (!step) { markErr.textContent = 'step: choose one'; return; }
    if (await act('Mark ' + step + ' succeeded', () => api.post(path + '/steps/' + api.enc(step) + '/succeed', body))) {
      markOutput.value = '';
      markNote.value = '';
    }
  }

  function cancelRun() {
    return confirmWithNote(`Cancel run ${id}? Steps not started never start; running ones are killed.`, 'Cancel run', 'Reason')
      .then(ask => (ask.ok ? act('Cancel', () => api.post(path + '/cancel', ask.note ? {reason: ask.note} : {})) : false));
  }

  async function rerunStep(step) {
    if (!await confirmAction(`Rerun step ${step} and every step after it in run ${id}? The steps before it keep their outputs.`, 'Rerun')) return;
    await act('Rerun from ' + step, () => api.post(path + '/rerun', {step}));
  }

  function renderRun(now) {
    const r = v;
    const def = v.definition || {};
    const zone = def.timezone;
    const running = r.state === 'running';
    const byName = new Map(v.steps.map(s => [s.name, s]));
    update(head, h('h1', {}, 'Run ', h('span', {class: 'mono'}, r.id)), wfState(r.state, {id: 'wf-run-state'}),
      h('a', {href: '#/workflows/' + encodeURIComponent(r.workflow), id: 'wf-run-workflow'}, r.workflow),
      h('span', {class: 'muted'}, 'for ' + show(r.scheduled_at, zone) + ' · ' + runDuration(r, now)));
    update(actions,
      running ? h('button', {type: 'button', id: 'wf-cancel', class: 'danger', onclick: cancelRun}, 'Cancel run') : '',
      !running && v.steps.some(s => s.state !== 'succeeded')
        ? h('button', {type: 'button', id: 'wf-rerun-failed', onclick: () => act('Rerun from the failed steps', () => api.post(path + '/rerun', {from: 'failed'}))},
          'Rerun from failed') : '',
      h('span', {class: 'hint'}, running ? 'Reruns and marks wait for the run to end (or be cancelled).'
        : 'Each step below can be rerun with what follows it, or a failed one marked succeeded.'));
    const kv = rows => h('dl', {class: 'kv'}, rows.filter(x => x[1] !== undefined && x[1] !== '' && x[1] !== null)
      .map(([k, val]) => [h('dt', {}, k), h('dd', {}, val)]));
    update(info, h('div', {class: 'cols'},
      kv([['Workflow', h('a', {href: '#/workflows/' + encodeURIComponent(r.workflow)}, r.workflow)],
        ['Logical time', h('span', {id: 'wf-run-logical'}, show(r.scheduled_at, zone))], ['Trigger', r.trigger],
        ['Version', 'v' + r.version], ['Started', show(r.created_at, zone)], ['Ended', show(r.ended_at, zone)],
        ['Duration', h('span', {id: 'wf-run-duration'}, runDuration(r, now))],
        ['Error', r.error ? h('span', {class: 'error', id: 'wf-run-error'}, r.error) : '']]),
      r.params !== undefined ? jsonBlock('params', 'Params', r.params, open, 'wf-run-params') : h('p', {class: 'muted'}, 'No params.')));

    update(dagBox, dag(v.steps, now, pick));
    update(ganttBox, gantt(v.steps, now, ganttBox.clientWidth || main.clientWidth || 800));

    // The steps a mark can take: failed, skipped or cancelled, once the run ended.
    const markable = running ? [] : v.steps.filter(s => MARKABLE.has(s.state));
    const cur = markable.some(s => s.name === markStep.value) ? markStep.value : (markable[0] || {}).name;
    update(markStep, markable.map(s => h('option', {value: s.name, selected: s.name === cur}, `${s.name} (${s.state})`)));
    if (cur) markStep.value = cur;
    markSection.hidden = markable.length === 0;

    update(stepsBox, v.steps.map(s => {
      const stepDef = (def.steps || []).find(d => d.name === s.name) || {};
      const inputs = {};
      for (const n of s.needs || []) {
        const up = byName.get(n);
        if (up && up.output !== undefined) inputs[n] = up.output;
      }
      // Oldest first. A step-level row (index -1) is a skip or a mark, shown as the step's;
      // one left pending only marks a rerun, superseded by the attempts it started.
      const attempts = (s.attempts || []).filter(a => a.index >= 0 || a.state !== 'pending')
        .sort((a, b) => a.attempt - b.attempt || a.index - b.index);
      const shown = attempts.slice(-ATTEMPTS_MAX);
      const rows = shown.map(a => h('tr', {dataset: {key: `a:${a.index}:${a.attempt}`, state: a.state}},
        h('td', {class: 'num'}, a.index < 0 ? 'step' : stepDef.fan_out ? a.index : '—'), h('td', {class: 'num'}, a.attempt),
        h('td', {}, wfState(a.state)),
        h('td', {class: 'mono'}, a.ticket ? h('a', {href: '#/run/' + encodeURIComponent(a.ticket)}, a.ticket) : '—'),
        h('td', {class: 'time phone-hide'}, show(a.started_at, zone)),
        h('td', {class: 'num'}, a.state === 'running' && a.started_at ? 'running ' + fmtDuration(Math.max(0, now - a.started_at))
          : a.started_at && a.ended_at ? fmtDuration(a.ended_at - a.started_at) : '—'),
        h('td', {}, a.state === 'running' && a.ticket
          ? h('button', {type: 'button', class: 'danger needs-write wf-kill', dataset: {ticket: a.ticket},
            onclick: () => killRun(a.ticket, () => load(true))}, 'Kill') : ''),
        h('td', {class: 'pre'}, a.error || '')));
      const what = [stepDef.fan_out ? `fan-out over ${stepDef.fan_out}` : '', stepDef.condition && stepDef.condition !== 'all_succeeded' ? 'when ' + stepDef.condition : '',
        (s.needs || []).length ? 'needs ' + s.needs.join(', ') : 'first step'].filter(Boolean).join(' · ');
      return h('section', {class: 'wf-step', dataset: {key: 'step:' + s.name, step: s.name, state: s.state}},
        h('h3', {}, s.name, ' ', wfState(s.state), ' ', h('span', {class: 'muted'}, [stepSpan(s, now), itemsText(s)].filter(Boolean).join(' · '))),
        h('p', {class: 'muted small'}, what),
        running ? '' : h('div', {class: 'row needs-write'},
          h('button', {type: 'button', class: 'wf-rerun-step', dataset: {key: 'rerun:' + s.name}, onclick: () => rerunStep(s.name)}, 'Rerun this step and what follows'),
          MARKABLE.has(s.state) ? h('button', {type: 'button', class: 'wf-mark-step', dataset: {key: 'mark:' + s.name}, onclick: () => markFor(s.name)}, 'Mark succeeded…') : ''),
        s.error ? h('pre', {class: 'block error wf-step-error'}, s.error) : '',
        (s.needs || []).length ? jsonBlock('in:' + s.name, 'Inputs (the outputs of ' + s.needs.join(', ') + ')', inputs, open)
          : h('p', {class: 'muted small'}, 'Inputs: none (a first step gets the run\'s params).'),
        s.output !== undefined ? jsonBlock('out:' + s.name, 'Output', s.output, open)
          : h('p', {class: 'muted small wf-no-output'}, s.state === 'succeeded' ? 'Output: none.' : 'Output: none yet.'),
        attempts.length ? h('div', {class: 'scroll'},
          attempts.length > shown.length ? h('p', {class: 'muted small'}, `The last ${shown.length} of ${attempts.length} attempts.`) : '',
          table(['Item', 'Attempt', 'State', 'Ticket', 'Started', 'Duration', '', 'Error'], rows, {class: 'compact attempts'}))
          : '');
    }));
  }

  // load reads the run; an unchanged answer of an ended run draws nothing (force: after an
  // action, draw anyway).
  async function load(force) {
    const data = await api.get(path);
    if (!force && api.unchanged(data) && data === v && data.state !== 'running') return;
    v = data;
    view.done = ENDED.has(v.state);
    renderRun(Date.now());
    info.dataset.state = v.state;
    info.dataset.seq = String(Number(info.dataset.seq || 0) + 1);
  }

  // Turning a phone (or narrowing the window) past the phone width lays the DAG out again,
  // left to right or top to bottom, and fits the Gantt to the new width.
  const mq = window.matchMedia('(max-width: 700px)');
  const relayout = () => { if (v) renderRun(Date.now()); };
  mq.addEventListener('change', relayout);
  view.stop = () => mq.removeEventListener('change', relayout);

  await load(true);
  return view;
}
