// headroom viz --compare: draws what /api/compare returns. No libraries,
// nothing loaded from elsewhere.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const $ = id => document.getElementById(id);
const W = 960, H = 320, LEFT = 80, RIGHT = 10, TOP = 10, BOTTOM = 30;
const COLORS = {a: '#4e79a7', b: '#f28e2c'};

function fmt(n) {
  const a = Math.abs(n), s = n < 0 ? '-' : '';
  if (a >= 2 ** 30) return s + (a / 2 ** 30).toFixed(2) + ' GiB';
  if (a >= 2 ** 20) return s + (a / 2 ** 20).toFixed(2) + ' MiB';
  if (a >= 2 ** 10) return s + (a / 2 ** 10).toFixed(2) + ' KiB';
  return s + a + ' B';
}
const signed = n => (n > 0 ? '+' : '') + fmt(n);
function el(tag, attrs, text) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
const bytesCell = (n, cls, text) => el('td', {class: 'num ' + (cls || ''), 'data-bytes': n, title: n + ' bytes'}, text || fmt(n));
function niceStep(max) {
  const raw = max / 4;
  let unit = 1;
  while (raw >= unit * 1024) unit *= 1024;
  for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1024]) if (m * unit >= raw) return m * unit;
  return raw;
}

async function load() {
  const r = await fetch('/api/compare');
  if (!r.ok) throw new Error('/api/compare: ' + r.status);
  render(await r.json());
}

function render(c) {
  $('meta').textContent = `A: ${c.a.file}, B: ${c.b.file}`;
  const sides = $('sides').tBodies[0];
  sides.replaceChildren();
  for (const [k, s] of [['a', c.a], ['b', c.b]]) {
    const tr = el('tr', {'data-side': k});
    const sw = el('td');
    sw.append(el('span', {class: 'swatch'}));
    sw.firstChild.style.background = COLORS[k];
    tr.append(sw, el('td', {}, `${k.toUpperCase()}: ${s.file}`), el('td', {}, s.source + (s.device ? ` (${s.device} device)` : '')),
      bytesCell(s.peak, 'peak'), el('td', {class: 'num'}, s.peak_event), bytesCell(s.reserved_peak, 'reserved'), el('td', {class: 'num'}, s.steps));
    sides.append(tr);
  }
  const pd = $('peak-diff');
  pd.textContent = signed(c.peak_diff);
  pd.setAttribute('data-bytes', c.peak_diff);
  overlay(c);
  const cats = $('category-table').tBodies[0];
  cats.replaceChildren(...c.categories.map(d => {
    const tr = el('tr', {'data-key': d.key});
    tr.append(el('td', {}, d.key), bytesCell(d.a, 'a'), bytesCell(d.b, 'b'), bytesCell(d.diff, 'diff', signed(d.diff)));
    return tr;
  }));
  $('tensor-note').textContent = `${c.differing} of ${c.tensor_keys} tensors (grouped by category and who asked) differ` +
    (c.tensors.length < c.tensor_keys ? `; the ${c.tensors.length} largest differences are listed` : '') + '.';
  $('tensor-note').setAttribute('data-differing', c.differing);
  const tens = $('tensor-table').tBodies[0];
  tens.replaceChildren(...c.tensors.map(d => {
    const tr = el('tr', {'data-key': d.key, class: d.diff ? 'differs' : ''});
    tr.append(el('td', {}, d.category), el('td', {class: 'mono'}, d.where || ''), bytesCell(d.a, 'a'), bytesCell(d.b, 'b'),
      bytesCell(d.diff, 'diff', signed(d.diff)), el('td', {class: 'num'}, `${d.a_count} / ${d.b_count}`));
    return tr;
  }));
}

function overlay(c) {
  const svg = $('overlay');
  svg.replaceChildren();
  const pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
  const maxY = Math.max(1, ...c.a.total, ...c.b.total);
  const y = v => TOP + ph - v * ph / maxY;
  for (const [k, s] of [['a', c.a], ['b', c.b]]) {
    // a step line: the memory holds from one event to the next
    const pts = [];
    s.at.forEach((at, i) => {
      const x = LEFT + at * pw;
      if (i > 0) pts.push(`${x.toFixed(1)},${y(s.total[i - 1]).toFixed(1)}`);
      pts.push(`${x.toFixed(1)},${y(s.total[i]).toFixed(1)}`);
    });
    const line = el('svg:polyline', {id: 'line-' + k, points: pts.join(' '), fill: 'none', stroke: COLORS[k], 'stroke-width': 1.5});
    line.append(el('svg:title', {}, `${k.toUpperCase()}: ${s.file}, peak ${fmt(s.peak)}`));
    svg.append(line);
    const pk = s.at[s.total.indexOf(s.peak)] ?? 0;
    svg.append(el('svg:line', {id: 'peak-' + k, 'stroke-dasharray': '4 3', x1: LEFT + pk * pw, x2: LEFT + pk * pw, y1: y(s.peak), y2: TOP + ph, stroke: COLORS[k]}));
  }
  const g = el('svg:g', {class: 'axis'});
  for (let v = 0, step = niceStep(maxY); v <= maxY; v += step) {
    g.append(el('svg:line', {x1: LEFT - 4, x2: LEFT, y1: y(v), y2: y(v), stroke: '#888'}));
    g.append(el('svg:text', {x: LEFT - 6, y: y(v) + 4, 'text-anchor': 'end'}, fmt(v)));
  }
  g.append(el('svg:line', {x1: LEFT, x2: LEFT, y1: TOP, y2: TOP + ph, stroke: '#888'}));
  g.append(el('svg:line', {x1: LEFT, x2: W - RIGHT, y1: TOP + ph, y2: TOP + ph, stroke: '#888'}));
  g.append(el('svg:text', {x: LEFT, y: H - 8}, 'start'));
  g.append(el('svg:text', {x: LEFT + pw / 2, y: H - 8, 'text-anchor': 'middle'}, 'x-axis: share of each history (events)'));
  g.append(el('svg:text', {x: W - RIGHT, y: H - 8, 'text-anchor': 'end'}, 'end'));
  svg.append(g);
}

load().catch(err => { $('meta').textContent = 'Error: ' + err.message; $('meta').className = 'error'; });
