// Nodes: the schedulers of this database (the nodes table of high availability), each with
// its role and when it was last seen by the database's clock, and who schedules which of the
// 256 shards a task's name hashes to (GET /api/v1/cluster, docs/scale-out.md).
import * as api from './api.js';
import {h, update, table} from './dom.js';
import {show, fmtDuration} from './time.js';

// sections render one part of the page each from what load fetched.
const sections = [
  {id: 'nodes', title: 'Nodes', fetch: () => api.get('nodes'), render: (r, me) => (r.nodes.length
    ? table(['Node', 'Role', 'Advertise', 'Last seen', 'Age'], r.nodes.map(n => h('tr', {dataset: {node: n.id, role: n.role}},
      h('td', {}, n.id, n.id === me ? h('small', {class: 'muted'}, ' (this node)') : ''),
      h('td', {}, h('span', {class: 'state ' + (n.role === 'primary' ? 'state-success' : n.role === 'stopped' ? 'state-waiting' : 'state-running')}, n.role)),
      h('td', {class: 'mono'}, n.advertise ? h('a', {href: n.advertise}, n.advertise) : '—'),
      h('td', {class: 'time'}, show(n.last_seen)), h('td', {class: 'num'}, fmtDuration(n.age_ms)))), {id: 'nodes-table'})
    : h('p', {class: 'muted', id: 'nodes-table'}, 'No node is listed: this axe runs without --ha, as a single node.'))},
  {id: 'shards', title: 'Shards', fetch: () => api.get('cluster'), render: renderShards},
];

const modeText = {
  'single': 'One node schedules every shard: this axe runs without --ha.',
  'primary-backup': 'The primary schedules every shard under its epoch; backups schedule none.',
  'sharded': 'Each node schedules the shards whose leases it holds.',
};

// renderShards draws the cluster: what the mode means, the shards no lease covers, each
// node's shards and epochs, and a 16 × 16 map of the shards coloured by holder.
function renderShards(c) {
  const holders = c.nodes.filter(n => n.shards_held > 0).map(n => n.id);
  const owner = new Array(c.shard_count).fill('');
  for (const n of c.nodes) {
    for (const part of (n.shards || '').split(',').filter(Boolean)) {
      const [lo, hi] = part.split('-').map(Number);
      for (let s = lo; s <= (hi === undefined ? lo : hi); s++) owner[s] = n.id;
    }
  }
  const epochs = n => (n.shards_held ? (n.epoch_min === n.epoch_max ? String(n.epoch_min) : n.epoch_min + '–' + n.epoch_max) : '—');
  const cells = owner.map((o, s) => h('span', {class: 'shard-cell' + (o ? ' shard-h' + (holders.indexOf(o) % 6) : ' shard-none'),
    title: 'shard ' + s + ': ' + (o || 'no live lease'), dataset: {shard: s, holder: o}}));
  return h('div', {id: 'shards-view', dataset: {mode: c.mode}},
    h('p', {id: 'shards-mode'}, modeText[c.mode] || c.mode),
    c.unowned ? h('p', {class: 'state-failed', id: 'shards-unowned'}, 'No live lease covers shards ' + c.unowned + ': their tasks fire once a node takes them.') : '',
    c.mode === 'single' ? '' : table(['Node', 'Role', 'Shards', 'Held', 'Epochs'], c.nodes.map(n => h('tr', {dataset: {node: n.id}},
      h('td', {}, n.shards_held ? h('span', {class: 'shard-cell swatch shard-h' + (holders.indexOf(n.id) % 6), 'aria-hidden': 'true'}) : '', n.id),
      h('td', {}, n.role), h('td', {class: 'mono'}, n.shards || '—'),
      h('td', {class: 'num'}, String(n.shards_held)), h('td', {class: 'num'}, epochs(n)))), {id: 'shards-table'}),
    c.mode === 'single' ? '' : h('div', {class: 'shard-map', id: 'shard-map', role: 'img', 'aria-label': 'map of the ' + c.shard_count + ' shards by holder'}, cells));
}

export async function render(main) {
  const boxes = sections.map(s => h('section', {'aria-labelledby': s.id + '-h'}, h('h2', {id: s.id + '-h'}, s.title), h('div', {class: 'scroll', id: s.id + '-box'})));
  main.append(h('h1', {}, 'Cluster'), ...boxes);
  async function load() {
    const [o, ...data] = await Promise.all([api.get('overview'), ...sections.map(s => s.fetch())]);
    sections.forEach((s, i) => update(boxes[i].lastChild, s.render(data[i], o.node)));
  }
  await load();
  return {refresh: load};
}
