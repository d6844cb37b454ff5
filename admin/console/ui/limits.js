// Concurrency limits: each group's and concurrency key's limit with its runs in flight and
// the fires waiting for it, with a form that sets one (PUT /api/v1/concurrency-limits/{kind}/
// {name}) and a button that removes it (DELETE).
import * as api from './api.js';
import {h, update, table, toast, confirmAction} from './dom.js';

const path = (kind, name) => `concurrency-limits/${encodeURIComponent(kind)}/${encodeURIComponent(name)}`;

export async function render(main) {
  const box = h('div', {class: 'scroll', id: 'limits'});
  const kind = h('select', {id: 'cl-kind', 'aria-label': 'Kind'}, h('option', {value: 'group'}, 'group'), h('option', {value: 'key'}, 'key'));
  const name = h('input', {id: 'cl-name', type: 'text', placeholder: 'a group, a concurrency_key, or a pattern: tenant:*', autocomplete: 'off', 'aria-label': 'Name'});
  const max = h('input', {id: 'cl-max', type: 'number', min: 1, 'aria-label': 'Runs in flight at once'});
  const err = h('p', {class: 'error', id: 'cl-error', role: 'alert'});
  const form = h('form', {id: 'cl-form', class: 'filters needs-write', novalidate: true, onsubmit: save},
    h('label', {}, 'Kind ', kind), h('label', {}, 'Name ', name), h('label', {}, 'Runs at once ', max),
    h('button', {type: 'submit', id: 'cl-save'}, 'Set'),
    h('span', {class: 'hint'}, 'A group limit counts the runs of the group\'s tasks, a key limit those of the tasks whose concurrency_key it names; a key pattern (tenant:*) limits each key it matches separately, and its keys in use are listed under it. A fire over a limit waits (best priority first) and starts when a run ends; a lower limit stops nothing that runs.'),
    err);
  main.append(h('h1', {}, 'Concurrency limits'), box, h('h2', {}, 'Set a limit'), form);

  async function save(ev) {
    ev.preventDefault();
    err.textContent = '';
    const n = name.value.trim();
    try {
      await api.call('PUT', path(kind.value, n), {max: Number(max.value || 0)});
      toast(`Concurrency limit of ${kind.value} ${n} set`);
      await load();
    } catch (e) { err.textContent = e.message; }
  }

  function edit(l) {
    kind.value = l.kind;
    name.value = l.name;
    max.value = String(l.max);
    max.focus();
  }

  async function load() {
    const r = await api.get('concurrency-limits');
    const ls = r.limits || [];
    update(box, ls.length === 0 ? h('p', {class: 'muted', id: 'limits-empty'}, 'No concurrency limits: runs of every group start when they are due.')
      : table(['Kind', 'Name', 'Max', 'In use', 'Waiting', h('span', {class: 'needs-write'}, 'Actions')],
        ls.flatMap(l => [h('tr', {dataset: {limit: `${l.kind}/${l.name}`}, class: !l.name.endsWith('*') && l.in_use >= l.max ? 'full' : ''},
          h('td', {}, l.kind), h('td', {class: 'mono'}, l.kind === 'group' ? h('a', {href: '#/tasks?group=' + encodeURIComponent(l.name)}, l.name) : l.name),
          h('td', {class: 'num'}, String(l.max)), h('td', {class: 'num cl-in-use'}, String(l.in_use)),
          h('td', {class: 'num cl-waiting'}, l.waiting ? h('strong', {}, String(l.waiting)) : '0'),
          h('td', {class: 'needs-write'}, h('button', {type: 'button', class: 'cl-edit', onclick: () => edit(l)}, 'Edit'), ' ',
            h('button', {type: 'button', class: 'cl-remove danger', onclick: async () => {
              const w = l.waiting ? ` Its ${l.waiting} waiting fire(s) start at once.` : '';
              if (!await confirmAction(`Remove the limit of ${l.kind} ${l.name}?${w}`, 'Remove')) return;
              try { await api.call('DELETE', path(l.kind, l.name)); toast(`Limit of ${l.kind} ${l.name} removed`); await load(); } catch (e) { toast(e.message, 'error'); }
            }}, 'Remove'))),
          // A pattern (tenant:*): each key in use, limited to max separately.
          ...(l.keys || []).map(k => h('tr', {dataset: {key: k.key}, class: 'cl-key' + (k.in_use >= l.max ? ' full' : '')},
            h('td', {class: 'muted'}, 'key'), h('td', {class: 'mono'}, '\u00a0\u00a0' + k.key),
            h('td', {class: 'num'}, String(l.max)), h('td', {class: 'num cl-in-use'}, String(k.in_use)),
            h('td', {class: 'num cl-waiting'}, k.waiting ? h('strong', {}, String(k.waiting)) : '0'), h('td', {class: 'needs-write'}))),
          ...((l.keys_in_use || 0) > (l.keys || []).length ? [h('tr', {class: 'cl-more'}, h('td', {}), h('td', {class: 'muted', colspan: 5},
            `${l.keys_in_use - l.keys.length} more keys in use`))] : [])]),
        {id: 'limits-table'}));
  }
  await load();
  return {refresh: load};
}
