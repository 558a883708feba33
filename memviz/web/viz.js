// headroom viz: draws what /api/summary and /api/state return. No
// libraries, nothing loaded from elsewhere.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const $ = id => document.getElementById(id);
const W = 960, H = 320, LEFT = 80, RIGHT = 10, TOP = 10, BOTTOM = 30;
let summary = null, device = null, points = [];

// fmt prints bytes as device.FormatBytes does: "1.50 MiB", "512 B".
function fmt(n) {
  const a = Math.abs(n), s = n < 0 ? '-' : '';
  if (a >= 2 ** 30) return s + (a / 2 ** 30).toFixed(2) + ' GiB';
  if (a >= 2 ** 20) return s + (a / 2 ** 20).toFixed(2) + ' MiB';
  if (a >= 2 ** 10) return s + (a / 2 ** 10).toFixed(2) + ' KiB';
  return s + a + ' B';
}
const hex = n => '0x' + n.toString(16);

function el(tag, attrs, text) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function bytesCell(n, cls) {
  return el('td', {class: 'num ' + (cls || 'bytes'), 'data-bytes': n, title: n + ' bytes'}, fmt(n));
}
function row(cells, attrs) {
  const tr = el('tr', attrs);
  for (const c of cells) tr.append(c instanceof Node ? c : el('td', {}, c));
  return tr;
}
function swatch(color) {
  const td = el('td');
  td.append(el('span', {class: 'swatch'}));
  td.firstChild.style.background = color;
  return td;
}
async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(url + ': ' + r.status + ' ' + (await r.text()));
  return r.json();
}
function fail(err) {
  $('meta').textContent = 'Error: ' + err.message;
  $('meta').className = 'error';
}

async function load() {
  const q = device === null ? '' : '?device=' + device;
  summary = await getJSON('/api/summary' + q);
  device = summary.device;
  render();
}

function render() {
  const s = summary;
  $('file').textContent = s.file;
  let meta = `${s.source === 'headroom' ? "headroom's" : "PyTorch's"} snapshot, ${s.events} events` +
      `, timeline stacked by ${s.mode}`;
  if (s.headroom) {
    meta += `; ${s.headroom.device} device` + (s.headroom.limit ? `, limit ${fmt(s.headroom.limit)}` : '');
  }
  $('meta').textContent = meta;
  $('meta').className = '';
  if (s.devices.length > 1) {
    $('device-label').hidden = false;
    const sel = $('device');
    sel.replaceChildren(...s.devices.map(d => el('option', d === s.device ? {value: d, selected: ''} : {value: d}, d)));
    sel.onchange = () => { device = Number(sel.value); load().catch(fail); };
  }
  $('peak-total').textContent = fmt(s.peak.total);
  $('peak-total').setAttribute('data-bytes', s.peak.total);
  $('peak-event').textContent = s.peak.event;
  if (s.headroom) {
    const p = $('allocator-peak'), ap = s.headroom.allocated_peak;
    p.textContent = ap === s.peak.total ? `(the allocator's own peak of allocated bytes: ${fmt(ap)})` :
      `(the allocator's peak statistics say ${fmt(ap)}: they were reset after this peak, or the history does not reach back to theirs)`;
    p.setAttribute('data-bytes', ap);
  }
  drawTimeline(s.timeline, s.peak);
  peakTable(s);
  largestTable(s.largest, s.mode);
  const last = Math.max(0, s.events - 1);
  for (const id of ['event-slider', 'event-input']) {
    const i = $(id);
    i.max = last;
    i.value = s.peak.event;
    i.oninput = () => select(Number(i.value));
  }
  $('goto-peak').onclick = () => select(s.peak.event);
  select(s.peak.event);
}

function drawTimeline(t, peak) {
  const svg = $('timeline');
  svg.replaceChildren();
  const n = t.index.length;
  const maxY = Math.max(1, ...t.total);
  const pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
  const x = k => LEFT + (n > 1 ? k * pw / (n - 1) : 0);
  const y = v => TOP + ph - v * ph / maxY;
  points = t.index;
  const xs = n > 1 ? t.index.map((_, k) => x(k)) : [LEFT, LEFT + pw];
  const at = k => Math.min(k, n - 1);
  const g = el('svg:g', {id: 'series'});
  const bottom = new Array(n).fill(0);
  for (const s of t.series) {
    const top = bottom.map((b, k) => b + s.values[k]);
    const up = xs.map((xv, k) => `${xv.toFixed(1)},${y(top[at(k)]).toFixed(1)}`);
    const down = xs.map((xv, k) => `${xv.toFixed(1)},${y(bottom[at(k)]).toFixed(1)}`).reverse();
    const poly = el('svg:polygon', {'data-key': s.key, fill: s.color, points: up.concat(down).join(' ')});
    poly.append(el('svg:title', {}, s.label));
    g.append(poly);
    top.forEach((v, k) => { bottom[k] = v; });
  }
  svg.append(g);
  const axis = el('svg:g', {class: 'axis'});
  for (let v = 0, step = niceStep(maxY); v <= maxY; v += step) {
    axis.append(el('svg:line', {x1: LEFT - 4, x2: LEFT, y1: y(v), y2: y(v), stroke: '#888'}));
    axis.append(el('svg:text', {x: LEFT - 6, y: y(v) + 4, 'text-anchor': 'end'}, fmt(v)));
  }
  axis.append(el('svg:line', {x1: LEFT, x2: LEFT, y1: TOP, y2: TOP + ph, stroke: '#888'}));
  axis.append(el('svg:line', {x1: LEFT, x2: W - RIGHT, y1: TOP + ph, y2: TOP + ph, stroke: '#888'}));
  const last = n ? t.index[n - 1] : 0;
  axis.append(el('svg:text', {x: LEFT, y: H - 8}, 'event 0'));
  axis.append(el('svg:text', {x: W - RIGHT, y: H - 8, 'text-anchor': 'end'}, 'event ' + last));
  svg.append(axis);
  const pk = Math.max(0, t.index.indexOf(peak.event));
  const px = n > 1 ? x(pk) : LEFT;
  svg.append(el('svg:line', {id: 'peak-line', class: 'peakline', x1: px, x2: px, y1: TOP, y2: TOP + ph}));
  svg.append(el('svg:text', {class: 'axis', x: px + 4, y: TOP + 12}, 'peak ' + fmt(peak.total)));
  svg.append(el('svg:line', {id: 'cursor', class: 'cursor', x1: px, x2: px, y1: TOP, y2: TOP + ph}));
  svg.onclick = ev => {
    const r = svg.getBoundingClientRect();
    const vx = (ev.clientX - r.left) * W / r.width;
    const k = Math.round((vx - LEFT) * (n - 1) / pw);
    if (n) select(t.index[Math.max(0, Math.min(n - 1, k))]);
  };
}

// niceStep: a tick step of 1, 2 or 5 times a power of ten of bytes, KiB,
// MiB or GiB that gives about four ticks.
function niceStep(max) {
  const raw = max / 4;
  let unit = 1;
  while (raw >= unit * 1024) unit *= 1024;
  for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1024]) if (m * unit >= raw) return m * unit;
  return raw;
}

function peakTable(s) {
  $('peak-key-head').textContent = s.mode === 'category' ? 'Category' : 'Allocation';
  // the allocator's breakdown at its peak, when that is this peak
  const alloc = s.headroom && s.headroom.allocated_peak === s.peak.total && s.headroom.category_at_peak;
  $('peak-alloc-head').hidden = !alloc;
  const body = $('peak-table').tBodies[0];
  body.replaceChildren();
  for (const v of s.peak.series) {
    if (s.mode === 'allocation' && !v.bytes) continue; // not live at the peak
    const share = s.peak.total ? (100 * v.bytes / s.peak.total).toFixed(1) + '%' : '';
    const cells = [swatch(v.color), el('td', {class: 'key'}, v.label), bytesCell(v.bytes), el('td', {class: 'num'}, share)];
    if (alloc) cells.push(bytesCell(alloc[v.key] || 0, 'allocator'));
    body.append(row(cells, {'data-key': v.key}));
  }
}

function largestTable(list) {
  const body = $('largest-table').tBodies[0];
  body.replaceChildren();
  list.forEach((a, i) => {
    const tr = row([swatch(a.color), bytesCell(a.size, 'size'), bytesCell(a.requested, 'requested'),
      el('td', {class: 'category'}, a.category || '—'), el('td', {class: 'module mono'}, a.module),
      el('td', {class: 'op mono'}, a.op), el('td', {class: 'num'}, a.since < 0 ? 'before the history' : a.since)],
    {'data-rank': i + 1, 'data-address': hex(a.address)});
    if (a.stack) tr.title = a.stack;
    body.append(tr);
  });
}

let pending = 0;
async function select(i) {
  const s = summary;
  i = Math.max(0, Math.min(i, Math.max(0, s.events - 1)));
  $('event-slider').value = i;
  $('event-input').value = i;
  const n = points.length;
  let k = points.findIndex(p => p >= i);
  if (k < 0) k = n - 1;
  const cx = n > 1 ? LEFT + k * (W - LEFT - RIGHT) / (n - 1) : LEFT;
  const c = $('cursor');
  if (c) { c.setAttribute('x1', cx); c.setAttribute('x2', cx); }
  const ticket = ++pending;
  const st = await getJSON(`/api/state?device=${s.device}&event=${i}`).catch(fail);
  if (st && ticket === pending) drawState(st);
}

function drawState(st) {
  $('event-desc').textContent = st.desc;
  $('state-reserved').textContent = fmt(st.reserved);
  $('state-reserved').setAttribute('data-bytes', st.reserved);
  $('state-active').textContent = fmt(st.active);
  $('state-active').setAttribute('data-bytes', st.active);
  $('state-segments').textContent = st.segment_count ?? st.segments.length;
  $('state-blocks').textContent = st.blocks;
  let note = '';
  if (st.unplaced) note += `${st.unplaced} live blocks have no place in a segment. `;
  if (st.truncated) note += `Too many blocks to draw: ${st.segments.length} segments are drawn, the rest of their blocks are grey, and the table lists the first ${MAX_ROWS} rows.`;
  $('state-note').textContent = note;

  const svg = $('segments');
  svg.replaceChildren();
  const rowH = 18, big = Math.max(1, ...st.segments.map(g => g.size));
  const pw = W - 2;
  svg.setAttribute('viewBox', `0 0 ${W} ${Math.max(1, st.segments.length) * rowH + 2}`);
  const body = $('blocks-table').tBodies[0];
  body.replaceChildren();
  let rows = 0;
  st.segments.forEach((g, r) => {
    const y = 1 + r * rowH, scale = pw / big;
    const seg = el('svg:g', {class: 'segment', 'data-address': hex(g.address)});
    const outline = el('svg:rect', {x: 1, y, width: Math.max(2, g.size * scale), height: rowH - 4, fill: '#fff', stroke: '#444', 'stroke-width': 0.5});
    outline.append(el('svg:title', {}, `segment ${hex(g.address)} (${g.type || 'pool unknown'}): ${fmt(g.size)}, ${fmt(g.active)} active`));
    seg.append(outline);
    for (const b of g.blocks) {
      const fill = b.state === 'active_allocated' ? b.color : b.state === 'active_pending_free' ? '#d62728' : b.state === 'arena' ? '#dcdcf0' : b.state === 'elided' ? '#999' : null;
      if (fill) {
        const rect = el('svg:rect', {x: 1 + (b.address - g.address) * scale, y, width: Math.max(0.5, b.size * scale), height: rowH - 4, fill, 'data-state': b.state});
        rect.append(el('svg:title', {}, b.state === 'elided' ? `${fmt(b.size)} holding ${b.count} more blocks, not drawn` :
          `${fmt(b.size)} ${b.state}${b.category ? ', ' + b.category : ''}${b.where ? ', ' + b.where : ''}`));
        seg.append(rect);
      }
    }
    svg.append(seg);
    if (rows >= MAX_ROWS) return;
    body.append(row([el('td', {class: 'mono'}, hex(g.address)), bytesCell(g.size), el('td'), el('td', {}, 'segment'),
      el('td', {}, g.type), el('td', {}, fmt(g.active) + ' active')], {class: 'seg'}));
    for (const b of g.blocks) {
      if (rows++ >= MAX_ROWS) break;
      const state = b.state === 'arena' ? 'free (arena)' : b.state === 'elided' ? `${b.count} more blocks, not listed` : b.state;
      body.append(row([el('td', {class: 'mono'}, hex(b.address)), bytesCell(b.size),
        b.requested ? bytesCell(b.requested, 'requested') : el('td'), el('td', {class: 'state'}, state),
        el('td', {}, b.category || ''), el('td', {class: 'mono'}, b.where || '')], {'data-state': b.state}));
    }
  });
}
const MAX_ROWS = 2000;

load().catch(fail);
