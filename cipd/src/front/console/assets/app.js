// cipd operators' console: read-only views of one node, drawn from its JSON endpoints.
//
// Every value shown comes from the network, much of it from peers' hints, and is hostile
// until proven otherwise: it goes into the page only as text (createTextNode, textContent)
// or as an attribute set with setAttribute, and links are built only from http(s) URLs.
// Nothing here parses data as HTML. The server's Content-Security-Policy allows this file
// and the stylesheet, nothing inline.
'use strict';

(function () {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const REFRESH_MS = 5000;
  const SAMPLE_MS = 2000;
  const MAX_SAMPLES = 90;
  const MESH_COLUMN_MAX = 30;

  const CONSOLE_PATH = document.body.getAttribute('data-console-path') || '/';
  const pageParams = new URLSearchParams(window.location.search);
  const TOKEN = pageParams.get('token');

  const byId = (id) => document.getElementById(id);

  // ---- DOM helpers: text and attributes only --------------------------------------------

  function setAttrs(e, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      e.setAttribute(k, String(v));
    }
  }

  function append(e, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function s(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  // ---- formatting -----------------------------------------------------------------------

  function fmtNum(n) {
    return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
  }

  function fmtDuration(sec) {
    if (sec === null || sec === undefined) return '—';
    sec = Math.max(0, Math.round(sec));
    const d = Math.floor(sec / 86400);
    const hh = Math.floor((sec % 86400) / 3600);
    const m = Math.floor((sec % 3600) / 60);
    const ss = sec % 60;
    if (d) return d + 'd ' + hh + 'h';
    if (hh) return hh + 'h ' + m + 'm';
    if (m) return m + 'm ' + ss + 's';
    return ss + 's';
  }

  function fmtWhen(unix) {
    if (unix === null || unix === undefined) return '—';
    const d = Date.now() / 1000 - unix;
    return d >= 0 ? fmtDuration(d) + ' ago' : 'in ' + fmtDuration(-d);
  }

  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    n = Number(n) || 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
  }

  function fmtRate(r) {
    if (r === null || r === undefined) return '—';
    return r >= 10 ? r.toFixed(0) : r.toFixed(2);
  }

  function truncate(text, n) {
    text = String(text);
    return text.length > n ? text.slice(0, n - 1) + '…' : text;
  }

  // ---- fetching -------------------------------------------------------------------------

  async function api(path, params) {
    const url = new URL(path, window.location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== '' && v !== null && v !== undefined) url.searchParams.set(k, String(v));
    }
    const headers = { Accept: 'application/json' };
    if (TOKEN) headers.Authorization = 'Bearer ' + TOKEN;
    const r = await fetch(url, { headers, cache: 'no-store', credentials: 'omit' });
    let body = null;
    try {
      body = await r.json();
    } catch (_) {
      body = null;
    }
    if (!r.ok) {
      const message = body && typeof body.message === 'string' ? body.message : 'HTTP ' + r.status;
      const err = new Error(message);
      err.status = r.status;
      throw err;
    }
    return body;
  }

  const errors = new Map();

  function report(what, err) {
    if (err) {
      const hint = err.status === 401 ? ' (open the console with ?token=… in its URL)' : '';
      errors.set(what, what + ': ' + err.message + hint);
    } else {
      errors.delete(what);
    }
    const box = byId('error');
    box.textContent = Array.from(errors.values()).join(' · ');
    box.hidden = errors.size === 0;
  }

  // A link to the console of the node at `base` (a referral's base-uri), showing `q`; null
  // unless `base` is an http(s) URL. Credentials in the URL and our token never go along.
  function consoleLink(base, q, possible) {
    let u;
    try {
      u = new URL(base);
    } catch (_) {
      return null;
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
    u.username = '';
    u.password = '';
    u.pathname = u.pathname.replace(/\/+$/, '') + CONSOLE_PATH;
    u.search = '';
    const frag = new URLSearchParams({ q });
    if (possible) frag.set('possible', 'true');
    u.hash = frag.toString();
    return u.href;
  }

  // ---- state ----------------------------------------------------------------------------

  let peers = [];
  let mesh = null;
  let lastMeshKey = '';
  const samples = [];
  const knownAttrs = new Set();

  function peerName(dsi) {
    const p = peers.find((x) => x.dsi === dsi && x.name !== dsi);
    return p ? p.name : null;
  }

  // ---- node -----------------------------------------------------------------------------

  async function refreshNode() {
    const [info, status] = await Promise.all([api('/v1/node'), api('/v1/status')]);
    document.title = 'cipd ' + info.dsi;
    byId('node-dsi').textContent = info.dsi;
    const ready = byId('ready');
    ready.textContent = status.ready ? 'ready' : 'starting';
    ready.className = 'badge ' + (status.ready ? 'ok' : 'warn');
    const listeners = h('ul', null, info.listeners.map((l) => h('li', null, l.kind + ' ', h('code', null, l.address))));
    const t = info.table;
    const o = info.outbound;
    const rows = [
      ['DSI', h('code', null, info.dsi)],
      ['Base URIs', info.base_uris.length ? info.base_uris.join(' ') : '—'],
      ['Version', info.version],
      ['Uptime', fmtDuration(info.uptime_seconds)],
      ['Ready', status.ready ? 'yes' : 'no (starting)'],
      ['Listeners', listeners],
      ['Local objects', fmtNum(info.local_objects)],
      ['Configured peers', fmtNum(info.peers)],
      ['Routing table', fmtNum(t.peers) + ' datasets, ' + fmtNum(t.values) + ' values, ' +
        fmtNum(t.entries) + ' entries, ' + fmtBytes(t.bytes)],
      ['Hints imported', fmtNum(info.import.imported) + ' of ' + fmtNum(info.import.expected) +
        ' expected peers'],
      ['Out-bound hint', 'generation ' + fmtNum(o.generation) + ', built from table ' +
        fmtNum(o.built_from) + ' of ' + fmtNum(o.table_generation) +
        (o.lag_seconds > 0 ? ', lagging ' + o.lag_seconds.toFixed(1) + ' s' : ', current')],
      ['Polls', fmtNum(status.polls_ok) + ' ok, ' + fmtNum(status.polls_failed) + ' failed'],
      ['Hints received', fmtNum(status.hints_accepted) + ' accepted, ' +
        fmtNum(status.hints_rejected) + ' refused'],
    ];
    byId('node-info').replaceChildren(...rows.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
  }

  // ---- peers ----------------------------------------------------------------------------

  // ok / failing / waiting for peers this node polls or pushes with; a peer that only
  // polls us has no state of ours to show.
  function peerState(p) {
    if (p.role.startsWith('learned')) return 'learned';
    const roles = p.role.split(',');
    if (!roles.some((r) => r === 'poll' || r === 'push' || r === 'pusher')) return 'polls-us';
    if (p.last_error) return 'failing';
    if (p.last_success !== null && p.last_success !== undefined) return 'ok';
    return 'waiting';
  }

  function backoff(p) {
    const m = mesh && mesh.peers.find((x) => x.name === p.name);
    if (!m) return '—';
    if (m.damped_until) return 'damped: changes held until ' + fmtWhen(m.damped_until);
    if (m.consecutive_failures > 0) {
      return m.consecutive_failures + ' failure' + (m.consecutive_failures === 1 ? '' : 's') +
        (m.next_poll ? ', next try ' + fmtWhen(m.next_poll) : '');
    }
    return m.next_poll ? 'next poll ' + fmtWhen(m.next_poll) : '—';
  }

  function renderPeers() {
    const body = byId('peers-table').tBodies[0];
    if (!peers.length) {
      body.replaceChildren(h('tr', null, h('td', { colspan: 12, class: 'muted' }, 'No peers configured or known.')));
      return;
    }
    body.replaceChildren(...peers.map((p) => {
      const state = peerState(p);
      return h('tr', { class: 'peer', 'data-name': p.name },
        h('td', null, p.name, p.address ? h('div', { class: 'muted mono' }, p.address) : null),
        h('td', null, p.role),
        h('td', { class: 'dsi' }, p.dsi || '—'),
        h('td', { class: 'state-' + state }, state.replace('-', ' ')),
        h('td', null, fmtWhen(p.last_poll)),
        h('td', null, fmtWhen(p.last_success)),
        h('td', { class: p.last_error ? 'error' : null }, p.last_error || '—'),
        h('td', null, backoff(p)),
        h('td', null, p.hint_age_seconds === null || p.hint_age_seconds === undefined ? '—' : fmtDuration(p.hint_age_seconds)),
        h('td', null, fmtWhen(p.expires)),
        h('td', { class: 'num' }, fmtNum(p.objects)),
        h('td', { class: 'num' }, fmtNum(p.values)));
    }));
    const select = byId('table-peer');
    const chosen = select.value;
    const options = [h('option', { value: '' }, 'any')];
    for (const p of peers) {
      if (p.dsi) options.push(h('option', { value: p.dsi }, p.name === p.dsi ? p.dsi : p.name + ' (' + p.dsi + ')'));
    }
    select.replaceChildren(...options);
    select.value = chosen;
  }

  async function refreshPeers() {
    const [p, m] = await Promise.all([api('/v1/peers'), api('/v1/mesh')]);
    peers = p.peers;
    mesh = m;
    byId('node-description').textContent = m.description || '';
    renderPeers();
    const key = JSON.stringify([m, peers.map(peerState)]);
    if (key !== lastMeshKey) {
      lastMeshKey = key;
      drawMesh();
    }
  }

  // ---- mesh picture ---------------------------------------------------------------------

  function drawMesh() {
    const svg = byId('mesh-svg');
    const nodes = new Map();
    const edges = [];
    const add = (key, col, label, sub, cls, title) => {
      if (!nodes.has(key)) nodes.set(key, { key, col, label, sub, cls, title });
      return nodes.get(key);
    };
    add('self', 1, 'this node', mesh.dsi, 'self', 'this node\n' + mesh.dsi + '\n' + mesh.base_uris.join(' '));
    const keyOfDsi = new Map();
    const states = new Map(peers.map((p) => [p.name, peerState(p)]));
    for (const p of mesh.peers) {
      const below = p.roles.includes('poll') || p.roles.includes('pusher');
      const key = 'peer:' + p.name;
      const state = states.get(p.name) || 'waiting';
      add(key, below ? 2 : 0, p.name, p.dsi || '(DSI not known yet)', state,
        p.name + ' (' + p.roles.join(', ') + ')\n' + (p.dsi || '') + '\n' + state);
      if (p.dsi) keyOfDsi.set(p.dsi, key);
      if (p.roles.includes('poll')) edges.push(['self', key, 'poll']);
      if (p.roles.includes('poller')) edges.push([key, 'self', 'poller']);
      if (p.roles.includes('push')) edges.push(['self', key, 'push']);
      if (p.roles.includes('pusher')) edges.push([key, 'self', 'pusher']);
    }
    for (const d of mesh.datasets) {
      let key = keyOfDsi.get(d.dsi);
      if (!key) {
        key = 'dsi:' + d.dsi;
        const via = d.via ? 'peer:' + d.via : null;
        const col = via && nodes.has(via) ? nodes.get(via).col + 1 : 3;
        add(key, col, d.description || 'learned dataset', d.dsi, 'learned',
          (d.description || 'dataset') + '\n' + d.dsi + (d.via ? '\nforwarded by ' + d.via : '') +
          (d.path && d.path.length ? '\npath: ' + d.path.join(' \u2192 ') : ''));
        if (via && nodes.has(via)) edges.push([via, key, 'via']);
      }
      keyOfDsi.set(d.dsi, key);
    }
    for (const d of mesh.datasets) {
      const from = keyOfDsi.get(d.dsi);
      for (const p of d.provenance) {
        if (p === d.dsi || p === mesh.dsi) continue;
        let to = keyOfDsi.get(p);
        if (!to) {
          to = 'dsi:' + p;
          add(to, Math.min(nodes.get(from).col + 1, 5), 'behind ' + nodes.get(from).label, p, 'learned',
            p + '\nin the hint of ' + d.dsi + ' (provenance)');
          keyOfDsi.set(p, to);
        }
        if (to !== from) edges.push([from, to, 'provenance']);
      }
    }

    // Layout: used columns left to right, nodes top to bottom.
    const W = 176;
    const H = 38;
    const GAP_X = 64;
    const GAP_Y = 16;
    const cols = Array.from(new Set(Array.from(nodes.values()).map((n) => n.col))).sort((a, b) => a - b);
    const perCol = new Map(cols.map((c) => [c, []]));
    for (const n of nodes.values()) perCol.get(n.col).push(n);
    let rowsMax = 1;
    const overflow = [];
    cols.forEach((c, i) => {
      const list = perCol.get(c);
      list.sort((a, b) => (a.key === 'self' ? -1 : b.key === 'self' ? 1 : a.label.localeCompare(b.label)));
      list.forEach((n, j) => {
        n.x = 10 + i * (W + GAP_X);
        n.y = 10 + j * (H + GAP_Y);
        n.shown = j < MESH_COLUMN_MAX;
      });
      if (list.length > MESH_COLUMN_MAX) {
        overflow.push([10 + i * (W + GAP_X), list.length - MESH_COLUMN_MAX]);
      }
      rowsMax = Math.max(rowsMax, Math.min(list.length, MESH_COLUMN_MAX + 1));
    });
    const width = 20 + cols.length * W + (cols.length - 1) * GAP_X;
    const height = 20 + rowsMax * (H + GAP_Y);
    svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    // Natural size, shrunk by the stylesheet to fit: a small mesh keeps readable text.
    svg.setAttribute('width', width);
    svg.setAttribute('height', height);

    const defs = s('defs', null,
      s('marker', { id: 'arrowhead', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        s('path', { d: 'M0,0 L10,5 L0,10 z' })));
    const edgeGroup = s('g', { class: 'edges' });
    const pairs = new Set(edges.map(([a, b]) => a + '\u0000' + b));
    const seen = new Set();
    for (const [a, b, kind] of edges) {
      const from = nodes.get(a);
      const to = nodes.get(b);
      if (!from || !to || !from.shown || !to.shown) continue;
      const id = a + '\u0000' + b + '\u0000' + kind;
      if (seen.has(id)) continue;
      seen.add(id);
      // Opposite edges between one pair (mutual polling) are offset so both stay visible.
      const lift = pairs.has(b + '\u0000' + a) ? (a < b ? -5 : 5) : 0;
      let d;
      if (from.x === to.x) {
        const down = to.y > from.y;
        const x = from.x + W / 2 + lift;
        d = 'M' + x + ',' + (down ? from.y + H : from.y) + ' L' + x + ',' + (down ? to.y : to.y + H);
      } else {
        const right = to.x > from.x;
        const x1 = right ? from.x + W : from.x;
        const x2 = right ? to.x : to.x + W;
        const y1 = from.y + H / 2 + lift;
        const y2 = to.y + H / 2 + lift;
        const mx = (x1 + x2) / 2;
        d = 'M' + x1 + ',' + y1 + ' C' + mx + ',' + y1 + ' ' + mx + ',' + y2 + ' ' + x2 + ',' + y2;
      }
      edgeGroup.appendChild(s('path', { class: 'edge ' + kind, d, 'marker-end': 'url(#arrowhead)' },
        s('title', null, kind)));
    }
    const nodeGroup = s('g', { class: 'nodes' });
    for (const n of nodes.values()) {
      if (!n.shown) continue;
      nodeGroup.appendChild(s('g', { class: 'node ' + n.cls, 'data-key': n.key },
        s('title', null, n.title),
        s('rect', { x: n.x, y: n.y, width: W, height: H, rx: 6 }),
        s('text', { x: n.x + 8, y: n.y + 15, class: 'label' }, truncate(n.label, 26)),
        s('text', { x: n.x + 8, y: n.y + 30, class: 'sub' }, truncate(n.sub, 28))));
    }
    for (const [x, more] of overflow) {
      nodeGroup.appendChild(s('text', { x: x + 8, y: 10 + MESH_COLUMN_MAX * (H + GAP_Y) + 14, class: 'more' },
        '+' + more + ' more'));
    }
    svg.replaceChildren(defs, edgeGroup, nodeGroup);
  }

  // ---- activity sparklines --------------------------------------------------------------

  const SERIES = [
    ['polls', 'Polls'],
    ['imports', 'Imports'],
    ['queries', 'Queries'],
  ];

  function rates(key) {
    const out = [];
    for (let i = 1; i < samples.length; i += 1) {
      const dt = samples[i].uptime_seconds - samples[i - 1].uptime_seconds;
      if (dt <= 0) continue;
      out.push(Math.max(0, (samples[i][key] - samples[i - 1][key]) / dt));
    }
    return out;
  }

  function sparkline(values) {
    const w = 180;
    const hgt = 36;
    const svg = s('svg', { class: 'spark', width: w, height: hgt, viewBox: '0 0 ' + w + ' ' + hgt, role: 'img' },
      s('line', { class: 'base', x1: 0, y1: hgt - 2, x2: w, y2: hgt - 2 }));
    if (values.length >= 2) {
      const max = Math.max(...values, 1e-9);
      const step = w / (MAX_SAMPLES - 2);
      const start = w - step * (values.length - 1);
      const points = values.map((v, i) => (start + i * step).toFixed(1) + ',' + (hgt - 2 - (v / max) * (hgt - 6)).toFixed(1));
      svg.appendChild(s('polyline', { points: points.join(' ') }));
    }
    return svg;
  }

  function drawSparklines() {
    const last = samples[samples.length - 1];
    byId('sparklines').replaceChildren(...SERIES.map(([key, label]) => {
      const r = rates(key);
      return h('figure', { class: 'spark', 'data-series': key },
        sparkline(r),
        h('figcaption', null, label + '/s ', h('span', { class: 'rate' }, fmtRate(r.length ? r[r.length - 1] : null)),
          h('span', { class: 'muted' }, ' · ' + fmtNum(last ? last[key] : null) + ' total')));
    }));
  }

  async function sample() {
    const c = await api('/v1/counters');
    samples.push(c);
    while (samples.length > MAX_SAMPLES) samples.shift();
    drawSparklines();
  }

  // The daemon keeps the last minutes of samples: the lines are drawn at once.
  async function loadHistory() {
    const past = await api('/v1/counters/history');
    if (Array.isArray(past)) {
      samples.splice(0, samples.length, ...past.slice(-MAX_SAMPLES));
      drawSparklines();
    }
  }

  // ---- query ----------------------------------------------------------------------------

  function queryFromLocation() {
    const frag = new URLSearchParams(window.location.hash.replace(/^#/, ''));
    const q = frag.get('q') || pageParams.get('q') || '';
    const p = frag.has('q') ? frag.get('possible') : pageParams.get('possible');
    return { q, possible: p === 'true' || p === '1' };
  }

  function renderMatches(terms) {
    return h('ul', { class: 'terms' }, terms.map((t) =>
      h('li', null, h('code', { class: 'term' }, t.term), ' → ' + fmtNum(t.count) + (t.possible ? ' (possible)' : ''),
        t.matches.length ? h('ul', null, t.matches.map(([attr, value, count]) =>
          h('li', null, h('code', null, attr), ' = ', h('span', { class: 'value' }, value), ' (' + fmtNum(count) + ')'))) : null)));
  }

  async function runQuery(q, possible) {
    const out = byId('query-result');
    byId('q').value = q;
    byId('possible').checked = possible;
    if (!q.trim()) {
      out.replaceChildren();
      return;
    }
    out.replaceChildren(h('p', { class: 'muted' }, 'Asking…'));
    const args = { q, possible: possible ? 'true' : 'false' };
    let explained;
    try {
      explained = await api('/v1/explain', args);
    } catch (err) {
      out.replaceChildren(h('p', { class: 'error', id: 'query-error' }, 'Query failed: ' + err.message));
      return;
    }
    // The plain answer adds this node's own matches and the datasets' descriptions.
    let answer = null;
    try {
      // As many as explain lists (the server caps it at limits.max_referrals).
      answer = await api('/v1/referrals', { ...args, limit: String(Math.max(explained.referrals.length, 1)) });
    } catch (_) {
      answer = null;
    }
    const descriptions = new Map(((answer && answer.referrals) || []).map((r) => [r.dsi, r.dsi_description]));
    const n = explained.referrals.length;
    const summary = h('p', { id: 'query-summary' },
      n + ' referral' + (n === 1 ? '' : 's') + ' for ', h('code', null, explained.query),
      answer ? '; this node holds ' + fmtNum(answer.local) + ' matching object' + (answer.local === 1 ? '' : 's') + ' itself.' : '.');
    if (!n) {
      out.replaceChildren(summary);
      return;
    }
    const rows = explained.referrals.map((r) => {
      const links = r.base_uris.map((b) => {
        const href = consoleLink(b, q, possible);
        return href
          ? h('li', null, h('a', { class: 'follow', href, rel: 'noopener noreferrer' }, 'console at ' + truncate(b, 60)))
          : h('li', null, h('code', null, b));
      });
      const description = descriptions.get(r.dsi);
      const name = peerName(r.dsi);
      return h('tr', { class: 'referral', 'data-dsi': r.dsi },
        h('td', { class: 'num' }, String(r.rank)),
        h('td', null, h('code', null, r.dsi), name ? h('div', null, 'peer ' + name) : null,
          description ? h('div', { class: 'muted' }, description) : null),
        h('td', { class: 'num' }, fmtNum(r.count) + ' / ' + fmtNum(r.total)),
        h('td', { class: 'kind' }, r.definite ? 'definite' : 'possible'),
        h('td', null, h('div', { class: 'reason' }, r.reason), renderMatches(r.terms)),
        h('td', null, h('ul', null, links)));
    });
    out.replaceChildren(summary, h('div', { class: 'scroll' }, h('table', { id: 'referrals' },
      h('thead', null, h('tr', null, ['Rank', 'Dataset', 'Count / total', 'Kind', 'Why this rank', 'Follow'].map((t) => h('th', null, t)))),
      h('tbody', null, rows))));
  }

  function onQuerySubmit(ev) {
    ev.preventDefault();
    const q = byId('q').value.trim();
    const possible = byId('possible').checked;
    const frag = new URLSearchParams({ q });
    if (possible) frag.set('possible', 'true');
    history.replaceState(null, '', '#' + frag.toString());
    runQuery(q, possible);
  }

  // ---- routing table --------------------------------------------------------------------
  //
  // A page of rows at a time; the filter and the page live in the URL fragment (tattr,
  // tprefix, tpeer, tpage, trows) so a view can be linked. The server gives the first N
  // rows by total (at most MAX_TABLE_ROWS): page k asks for k pages and one row more, to
  // know whether a next page exists. Values longer than VALUE_CUT are cut; a click shows
  // the whole value.

  const MAX_TABLE_ROWS = 1000;
  const VALUE_CUT = 120;
  const table = { page: 1 };

  function tableFromLocation() {
    const frag = new URLSearchParams(window.location.hash.replace(/^#/, ''));
    byId('table-attr').value = frag.get('tattr') || '';
    byId('table-prefix').value = frag.get('tprefix') || '';
    const rows = frag.get('trows');
    if (rows && ['25', '50', '100'].includes(rows)) byId('table-rows-per-page').value = rows;
    table.peer = frag.get('tpeer') || '';
    table.page = Math.max(1, parseInt(frag.get('tpage') || '1', 10) || 1);
  }

  function tableToLocation() {
    const frag = new URLSearchParams(window.location.hash.replace(/^#/, ''));
    const set = (k, v) => (v && v !== '1' && !(k === 'trows' && v === '25') ? frag.set(k, v) : frag.delete(k));
    set('tattr', byId('table-attr').value.trim());
    set('tprefix', byId('table-prefix').value);
    set('tpeer', byId('table-peer').value);
    set('tpage', String(table.page));
    set('trows', byId('table-rows-per-page').value);
    const hash = frag.toString();
    window.history.replaceState(null, '', hash ? '#' + hash : window.location.pathname + window.location.search);
  }

  function valueCell(value) {
    const text = String(value);
    if (text.length <= VALUE_CUT) return h('td', { class: 'value' }, text);
    const cell = h('td', { class: 'value cut', title: 'click to show the whole value (' + fmtNum(text.length) + ' characters)' },
      truncate(text, VALUE_CUT));
    cell.addEventListener('click', () => {
      const whole = cell.classList.toggle('whole');
      cell.textContent = whole ? text : truncate(text, VALUE_CUT);
    });
    return cell;
  }

  async function refreshTable() {
    const attr = byId('table-attr').value.trim();
    const prefix = byId('table-prefix').value;
    const peerSelect = byId('table-peer');
    if (table.peer !== undefined && Array.from(peerSelect.options).some((o) => o.value === table.peer)) {
      peerSelect.value = table.peer;
    }
    table.peer = undefined;
    const peer = peerSelect.value;
    const per = parseInt(byId('table-rows-per-page').value, 10) || 25;
    const lastPage = Math.floor(MAX_TABLE_ROWS / per);
    table.page = Math.min(table.page, lastPage);
    const top = Math.min(table.page * per + 1, MAX_TABLE_ROWS);
    const body = byId('table-rows').tBodies[0];
    let data;
    try {
      data = await api('/v1/table', { attr, prefix, peer, top });
      report('table', null);
    } catch (err) {
      body.replaceChildren(h('tr', null, h('td', { colspan: 4, class: 'error' }, err.message)));
      return;
    }
    for (const r of data.rows) knownAttrs.add(r.attr);
    byId('table-attrs').replaceChildren(...Array.from(knownAttrs).sort().map((a) => h('option', { value: a })));
    const first = (table.page - 1) * per;
    const rows = data.rows.slice(first, first + per);
    const more = data.rows.length > first + per;
    if (!rows.length && table.page > 1) {
      table.page = Math.max(1, Math.ceil(data.rows.length / per));
      return refreshTable();
    }
    tableToLocation();
    byId('table-page').textContent = rows.length
      ? 'rows ' + fmtNum(first + 1) + '–' + fmtNum(first + rows.length) + (more ? ' of more' : ' of ' + fmtNum(first + rows.length))
      : '';
    byId('table-prev').disabled = table.page <= 1;
    byId('table-next').disabled = !more || table.page >= lastPage;
    if (!rows.length) {
      body.replaceChildren(h('tr', null, h('td', { colspan: 4, class: 'muted' }, 'No values match.')));
      return;
    }
    body.replaceChildren(...rows.map((r) =>
      h('tr', { class: 'table-row' },
        h('td', null, h('code', null, r.attr)),
        valueCell(r.value),
        h('td', { class: 'num' }, fmtNum(r.total)),
        h('td', { class: 'per-peer' }, h('ul', null, r.peers.map(([dsi, count]) => {
          const name = peerName(dsi);
          return h('li', null, h('code', { class: 'dsi' }, dsi), name ? ' (' + name + ')' : '', ': ' + fmtNum(count));
        }))))));
  }

  // ---- start ----------------------------------------------------------------------------

  async function guarded(what, f) {
    try {
      await f();
      report(what, null);
    } catch (err) {
      report(what, err);
    }
  }

  async function refreshLoop() {
    await guarded('node', refreshNode);
    await guarded('peers', refreshPeers);
    window.setTimeout(refreshLoop, REFRESH_MS);
  }

  async function sampleLoop() {
    await guarded('activity', sample);
    window.setTimeout(sampleLoop, SAMPLE_MS);
  }

  async function startSampling() {
    await guarded('activity', loadHistory);
    sampleLoop();
  }

  byId('query-form').addEventListener('submit', onQuerySubmit);
  byId('table-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    table.page = 1;
    refreshTable();
  });
  byId('table-prev').addEventListener('click', () => {
    table.page = Math.max(1, table.page - 1);
    refreshTable();
  });
  byId('table-next').addEventListener('click', () => {
    table.page += 1;
    refreshTable();
  });
  window.addEventListener('hashchange', () => {
    const { q, possible } = queryFromLocation();
    runQuery(q, possible);
  });

  async function start() {
    const node = guarded('node', refreshNode);
    // Peers before the query and table views, which name datasets by their peers.
    await guarded('peers', refreshPeers);
    const { q, possible } = queryFromLocation();
    if (q) runQuery(q, possible);
    tableFromLocation();
    refreshTable();
    await node;
    window.setTimeout(refreshLoop, REFRESH_MS);
  }

  drawSparklines();
  startSampling();
  start();
})();
