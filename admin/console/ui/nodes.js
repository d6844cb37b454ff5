// Nodes: the schedulers of this database (the nodes table of high availability), each with
// its role and when it was last seen by the database's clock. Sections are added here as the
// cluster's API grows (e.g. its shards).
import * as api from './api.js';
import {h, replace, table} from './dom.js';
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
];

export async function render(main) {
  const boxes = sections.map(s => h('section', {'aria-labelledby': s.id + '-h'}, h('h2', {id: s.id + '-h'}, s.title), h('div', {class: 'scroll', id: s.id + '-box'})));
  main.append(h('h1', {}, 'Cluster'), ...boxes);
  async function load() {
    const [o, ...data] = await Promise.all([api.get('overview'), ...sections.map(s => s.fetch())]);
    sections.forEach((s, i) => replace(boxes[i].lastChild, s.render(data[i], o.node)));
  }
  await load();
  return {refresh: load};
}
