// headroom viz: draws what /api/summary and /api/state return. No
// libraries, nothing loaded from elsewhere.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const $ = id => document.getElementById(id);
const W = 960, H = 320, LEFT = 80, RIGHT = 10, TOP = 10, BOTTOM = 30;
let summary = null, device = null, detail = 0;
// zoom: the shown range of events, inclusive. view: the timeline drawn
// and the range of its points shown (the summary's, or, zoomed into a
// history longer than its points, the server's points of the range).
let zoom = null, view = null;
// axis: what the x-axis shows, 'time' (when the file has times) or 'event'.
let axis = null;
// The page's state can be given in the URL's hash (#event=N&detail=K&zoom=A-B),
// so that a view can be linked to (and tested).
const hashArgs = new URLSearchParams(location.hash.slice(1));
if (hashArgs.has('detail')) detail = Number(hashArgs.get('detail')) || 0;
if (hashArgs.get('axis') === 'event' || hashArgs.get('axis') === 'events') axis = 'event';

// fmtTime prints a duration given in microseconds.
function fmtTime(us) {
  const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(a >= 1e8 ? 0 : 2) + ' s';
  if (a >= 1e3) return (us / 1e3).toFixed(2) + ' ms';
  return us + ' µs';
}
// timed: whether timeline t is drawn against time.
const timed = t => axis === 'time' && t.time && t.time.length === t.index.length;
// xPositions is the x of each of t's points z0 to z1 across [left,
// left+width]: by time when the axis is time, else one step per point.
function xPositions(t, z0, z1, left, width) {
  const n = z1 - z0 + 1, xs = [];
  const tm = timed(t) && t.time[z1] > t.time[z0] ? t.time : null;
  for (let k = z0; k <= z1; k++) {
    xs.push(tm ? left + (tm[k] - tm[z0]) * width / (tm[z1] - tm[z0]) : left + (n > 1 ? (k - z0) * width / (n - 1) : 0));
  }
  return xs;
}
// nearest is the index into xs of the position nearest to vx.
function nearest(xs, vx) {
  let lo = 0, hi = xs.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < vx) lo = mid + 1; else hi = mid;
  }
  return lo > 0 && vx - xs[lo - 1] < xs[lo] - vx ? lo - 1 : lo;
}

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
  const q = new URLSearchParams();
  if (device !== null) q.set('device', device);
  if (detail) q.set('detail', detail);
  summary = await getJSON('/api/summary?' + q);
  device = summary.device;
  render();
  if (summary.live) startLive();
}

// The live view (headroom train --live): the steps stream in as server-sent
// events; each updates the status line and the chart, and the snapshot is
// fetched again at most every two seconds.
let liveSource = null, liveSteps = [], liveReload = null;
const MAX_LIVE_POINTS = 1000;
// liveReloadSoon fetches the whole run so far again, from a fresh page of
// events, at most every two seconds.
function liveReloadSoon() {
  if (!liveReload) liveReload = setTimeout(() => { liveReload = null; zoom = null; listFrom = -1; load().catch(fail); }, 2000);
}
function startLive() {
  if (liveSource) return;
  $('live').hidden = false;
  liveSource = new EventSource('/api/live');
  liveSource.onmessage = ev => {
    const st = JSON.parse(ev.data);
    liveSteps.push(st);
    if (liveSteps.length > MAX_LIVE_POINTS) liveSteps.shift();
    const p = $('live-status');
    p.textContent = `Live: step ${st.step} (epoch ${st.epoch}): loss ${st.loss === null ? 'not computed' : st.loss.toFixed(4)}, ` +
      `${st.samples_per_s.toFixed(0)} samples/s, ` + (st.allocated || st.reserved ? `allocated ${fmt(st.allocated)}, reserved ${fmt(st.reserved)}, ` : '') +
      `step peak ${fmt(st.peak_allocated)} allocated, ${fmt(st.peak_reserved)} reserved`;
    for (const [k, v] of Object.entries({step: st.step, allocated: st.allocated, reserved: st.reserved})) p.setAttribute('data-' + k, v);
    liveProcess(st.process);
    drawLive();
    liveReloadSoon();
  };
  // viz --follow: another process wrote the snapshot file again
  liveSource.addEventListener('snapshot', ev => {
    const p = $('live-status');
    p.setAttribute('data-snapshots', ev.data);
    if (!liveSteps.length) p.textContent = `Following the file: snapshot ${ev.data} read ${new Date().toLocaleTimeString()}`;
    liveReloadSoon();
  });
  liveSource.addEventListener('done', ev => {
    $('live-status').textContent = JSON.parse(ev.data) + '. ' + $('live-status').textContent.replace(/^Live: /, 'Last: ');
    $('live-status').setAttribute('data-done', 'true');
    liveSource.close();
  });
}
// liveProcess: the whole process beside the allocator (resident memory,
// device segments, Go heap, data loader), when the run samples it.
function liveProcess(m) {
  const p = $('live-process');
  if (!m) { p.hidden = true; return; }
  p.hidden = false;
  let t = `Process: ${m.resident >= 0 ? `resident ${fmt(m.resident)} (peak ${fmt(m.resident_peak)})` : 'resident memory unknown on this OS'}, ` +
    `device segments ${fmt(m.segments)} mapped (${m.segment_count}), ${fmt(m.allocated)} allocated in them, ` +
    `Go heap ${fmt(m.go_heap)} in ${m.go_heap_objects} objects (runtime ${fmt(m.go_runtime)}, ${m.gc_cycles} GCs)`;
  if (m.loader_staging || m.loader_heap) t += `, data loader ${fmt(m.loader_staging)} staging and ${fmt(m.loader_heap)} on the heap`;
  p.textContent = t;
  for (const [k, v] of Object.entries({resident: m.resident, segments: m.segments, 'go-heap': m.go_heap, 'gc-cycles': m.gc_cycles, 'loader-staging': m.loader_staging})) p.setAttribute('data-' + k, v);
}
// drawLive: the loss (line) and the allocated and reserved peaks (bars,
// scaled to the largest) of the steps so far.
function drawLive() {
  const svg = $('live-chart'), LH = 120, pw = W - LEFT - RIGHT, ph = LH - 20;
  svg.replaceChildren();
  const n = liveSteps.length;
  if (!n) return;
  const x = k => LEFT + (n > 1 ? k * pw / (n - 1) : 0);
  const maxM = Math.max(1, ...liveSteps.map(s => s.peak_reserved));
  const losses = liveSteps.map(s => s.loss).filter(v => v !== null);
  const lo = Math.min(...losses), hi = Math.max(...losses);
  const mem = (key, color) => el('svg:polyline', {fill: 'none', stroke: color, 'stroke-width': 1,
    points: liveSteps.map((s, k) => `${x(k).toFixed(1)},${(5 + ph - s[key] * ph / maxM).toFixed(1)}`).join(' ')});
  svg.append(mem('peak_reserved', '#bab0ab'), mem('peak_allocated', '#4e79a7'));
  if (losses.length) {
    const y = v => 5 + ph - (hi > lo ? (v - lo) * ph / (hi - lo) : ph / 2);
    const pts = [];
    liveSteps.forEach((s, k) => { if (s.loss !== null) pts.push(`${x(k).toFixed(1)},${y(s.loss).toFixed(1)}`); });
    svg.append(el('svg:polyline', {id: 'live-loss', fill: 'none', stroke: '#e15759', 'stroke-width': 1.5, points: pts.join(' ')}));
  }
  svg.append(el('svg:text', {class: 'axis', x: LEFT - 6, y: 15, 'text-anchor': 'end'}, fmt(maxM)));
  svg.append(el('svg:text', {class: 'axis', x: LEFT, y: LH - 3}, `step ${liveSteps[0].step}`));
  svg.append(el('svg:text', {class: 'axis', x: LEFT + pw / 2, y: LH - 3, 'text-anchor': 'middle'}, 'red: loss; blue: peak allocated; grey: peak reserved'));
  svg.append(el('svg:text', {class: 'axis', x: W - RIGHT, y: LH - 3, 'text-anchor': 'end'}, `step ${liveSteps[n - 1].step}`));
}

function render() {
  const s = summary;
  $('file').textContent = s.file;
  // The count the file has; what the page shows after merging, said as such.
  let meta = `${s.source === 'headroom' ? "headroom's" : "PyTorch's"} snapshot, ${s.file_events} events in the file`;
  if (s.merged) meta += ` (${s.merged} free_requested and free_completed pairs shown as one free each: ${s.events} events shown)`;
  meta += `, timeline stacked by ${s.mode}`;
  if (s.headroom) {
    meta += `; ${s.headroom.device} device` + (s.headroom.limit ? `, limit ${fmt(s.headroom.limit)}` : '');
  }
  $('meta').textContent = meta;
  $('meta').className = '';
  if (axis === null) axis = s.axis;
  $('axis-label').hidden = s.axis !== 'time';
  $('axis').value = axis;
  $('axis').onchange = () => { axis = $('axis').value; applyZoom().catch(fail); drawSteps(s); };
  if (s.devices.length > 1) {
    $('device-label').hidden = false;
    const sel = $('device');
    sel.replaceChildren(...s.devices.map(d => el('option', d === s.device ? {value: d, selected: ''} : {value: d}, d)));
    sel.onchange = () => { device = Number(sel.value); zoom = null; listFrom = -1; load().catch(fail); };
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
  ooms(s);
  const dl = $('detail');
  $('detail-label').hidden = s.mode !== 'allocation';
  if (s.mode === 'allocation') {
    dl.value = s.detail;
    dl.setAttribute('value', s.detail);
    dl.onchange = () => { detail = Math.max(1, Number(dl.value) || 1); load().catch(fail); };
  }
  if (!zoom) {
    zoom = [0, Math.max(0, s.events - 1)];
    const z = /^(\d+)-(\d+)$/.exec(hashArgs.get('zoom') || '');
    if (z) zoom = [Number(z[1]), Number(z[2])];
  }
  $('zoom-reset').onclick = () => { zoom = [0, Math.max(0, s.events - 1)]; applyZoom().catch(fail); };
  view = {t: s.timeline, r: s.reserved, z0: 0, z1: Math.max(0, s.timeline.index.length - 1)};
  drawTimeline(s.peak);
  applyZoom().catch(fail);
  peakTable(s);
  largestTable(s.largest, s.mode);
  drawSteps(s);
  const lastEv = Math.max(0, s.events - 1);
  for (const id of ['event-slider', 'event-input']) {
    const i = $(id);
    i.max = lastEv;
    i.value = s.peak.event;
    i.oninput = () => select(Number(i.value), true);
  }
  $('goto-peak').onclick = () => select(s.peak.event);
  const start = hashArgs.has('event') ? Number(hashArgs.get('event')) : s.peak.event;
  select(start, hashArgs.has('event'));
  const band = s.timeline.series.find(b => b.key === hashArgs.get('band'));
  if (band) showBand(band);
}

// ooms says first what went wrong: the out-of-memory events, each with
// the request refused and what the device had free.
function ooms(s) {
  const p = $('oom-summary'), list = $('oom-list');
  p.hidden = list.hidden = !s.oom_count;
  p.setAttribute('data-count', s.oom_count);
  list.replaceChildren();
  if (!s.oom_count) return;
  p.textContent = `${s.oom_count} out-of-memory event${s.oom_count > 1 ? 's' : ''}` +
      (s.oom_count > s.ooms.length ? ` (the first ${s.ooms.length} listed)` : '') + ':';
  for (const o of s.ooms) {
    const free = o.device_free < 0 ? 'no limit' : o.device_free ? fmt(o.device_free) + ' free' : 'free memory not recorded';
    const li = el('li', {'data-event': o.event, 'data-requested': o.requested, 'data-device-free': o.device_free},
      `event ${o.event}: ${fmt(o.requested)} requested, ${free}, ${fmt(o.active)} active` + (o.where ? `, asked by ${o.where}` : ''));
    const a = el('a', {href: '#event=' + o.event}, ' show');
    a.onclick = ev => { ev.preventDefault(); select(o.event, true); };
    li.append(a);
    list.append(li);
  }
}

// firstPoint: the first of t's points at or after event i (the last
// point when none is).
function firstPoint(t, i) {
  const k = t.index.findIndex(p => p >= i);
  return k < 0 ? t.index.length - 1 : k;
}
function lastPoint(t, i) {
  let k = t.index.length - 1;
  while (k > 0 && t.index[k] > i) k--;
  return k;
}

// applyZoom draws the zoomed range: from the summary's points when they
// are every event, else from the server's points of the range.
async function applyZoom() {
  const s = summary, t = s.timeline, last = Math.max(0, s.events - 1);
  let [a, b] = zoom;
  a = Math.max(0, Math.min(a, last));
  b = Math.max(0, Math.min(b, last));
  if (a > b) [a, b] = [b, a];
  if (a === b && last > 0) { if (b < last) b++; else a--; }
  zoom = [a, b];
  const whole = a === 0 && b === last;
  if (!whole && t.index.length < s.events) {
    const q = new URLSearchParams({device: s.device, from: a, to: b, detail: detail});
    const rt = await getJSON('/api/timeline?' + q);
    if (zoom[0] !== a || zoom[1] !== b) return; // zoomed again meanwhile
    view = {t: rt, r: rt.reserved, z0: 0, z1: rt.index.length - 1};
  } else {
    view = {t, r: s.reserved, z0: firstPoint(t, a), z1: lastPoint(t, b)};
  }
  drawTimeline(s.peak);
  drawMinimap(t);
  moveCursor(Number($('event-input').value));
}

// setZoom zooms to the summary's points a to b (the minimap's).
function setZoom(a, b) {
  const idx = summary.timeline.index;
  a = Math.max(0, Math.min(a, idx.length - 1));
  b = Math.max(0, Math.min(b, idx.length - 1));
  zoom = [idx[Math.min(a, b)], idx[Math.max(a, b)]];
  applyZoom().catch(fail);
}

function drawTimeline(peak) {
  const svg = $('timeline');
  svg.replaceChildren();
  const {t, z0, z1} = view;
  const all = t.index.length;
  const n = all ? z1 - z0 + 1 : 0;
  const shown = t.total.slice(z0, z1 + 1);
  const maxY = Math.max(1, ...shown);
  const pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
  const px = n ? xPositions(t, z0, z1, LEFT, pw) : [];
  view.xs = px;
  const x = k => n ? px[Math.max(0, Math.min(n - 1, k - z0))] : LEFT;
  const y = v => TOP + ph - v * ph / maxY;
  const ks = [];
  for (let k = z0; k <= z1 && all; k++) ks.push(k);
  const xs = n > 1 ? px : [LEFT, LEFT + pw];
  const at = j => ks[Math.min(j, ks.length - 1)];
  const g = el('svg:g', {id: 'series'});
  const bottom = new Array(all).fill(0);
  for (const s of t.series) {
    const top = bottom.map((b, k) => b + s.values[k]);
    const up = xs.map((xv, j) => `${xv.toFixed(1)},${y(top[at(j)]).toFixed(1)}`);
    const down = xs.map((xv, j) => `${xv.toFixed(1)},${y(bottom[at(j)]).toFixed(1)}`).reverse();
    const poly = el('svg:polygon', {'data-key': s.key, fill: s.color, points: up.concat(down).join(' ')});
    poly.append(el('svg:title', {}, s.label));
    poly.setAttribute('tabindex', 0);
    poly.onclick = ev => { ev.stopPropagation(); showBand(s); }; // the band, not the event under it
    poly.onkeydown = ev => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); showBand(s); } };
    g.append(poly);
    top.forEach((v, k) => { bottom[k] = v; });
  }
  svg.append(g);
  const axisG = yAxis(maxY, y, TOP, TOP + ph);
  const first = n ? t.index[z0] : 0, last = n ? t.index[z1] : 0;
  xLabels(axisG, t, z0, z1, n, H - 8);
  svg.append(axisG);
  drawStepTicks(svg, t, z0, z1, x, TOP, TOP + ph);
  const zoomed = zoom && (zoom[0] > 0 || zoom[1] < summary.events - 1);
  $('zoom-range').textContent = n && zoomed ? `events ${first} to ${last} of ${summary.events}` : '';
  $('zoom-reset').hidden = !zoomed;
  const marks = el('svg:g', {id: 'oom-marks'});
  for (const o of summary.ooms) {
    if (!n || o.event < t.index[z0] || o.event > t.index[z1]) continue;
    const k = firstPoint(t, o.event);
    const ox = x(k);
    const line = el('svg:line', {class: 'oomline', 'data-event': o.event, x1: ox, x2: ox, y1: TOP, y2: TOP + ph});
    line.append(el('svg:title', {}, `out of memory at event ${o.event}: ${fmt(o.requested)} requested`));
    marks.append(line);
    marks.append(el('svg:text', {class: 'axis oom', x: ox + 3, y: TOP + ph - 4, fill: '#b00'}, 'OOM'));
  }
  svg.append(marks);
  const pk = Math.max(0, t.index.indexOf(peak.event));
  if (pk >= z0 && pk <= z1) {
    const lx = n > 1 ? x(pk) : LEFT;
    svg.append(el('svg:line', {id: 'peak-line', class: 'peakline', x1: lx, x2: lx, y1: TOP, y2: TOP + ph}));
    // near the right edge the label goes to the line's left, not off the plot
    const right = lx > W - RIGHT - 90;
    svg.append(el('svg:text', {class: 'axis', x: right ? lx - 4 : lx + 4, y: TOP + 12, 'text-anchor': right ? 'end' : 'start'}, 'peak ' + fmt(peak.total)));
  }
  svg.append(el('svg:line', {id: 'cursor', class: 'cursor', x1: LEFT, x2: LEFT, y1: TOP, y2: TOP + ph}));
  svg.onclick = ev => {
    const r = svg.getBoundingClientRect();
    const vx = (ev.clientX - r.left) * W / r.width;
    if (n) select(t.index[z0 + nearest(px, vx)], true);
  };
  drawReserved();
}

// yAxis is the byte axis of a plot from top to bottom.
function yAxis(maxY, y, top, bottom) {
  const g = el('svg:g', {class: 'axis'});
  for (let v = 0, step = niceStep(maxY); v <= maxY; v += step) {
    g.append(el('svg:line', {x1: LEFT - 4, x2: LEFT, y1: y(v), y2: y(v), stroke: '#888'}));
    g.append(el('svg:text', {x: LEFT - 6, y: y(v) + 4, 'text-anchor': 'end'}, fmt(v)));
  }
  g.append(el('svg:line', {x1: LEFT, x2: LEFT, y1: top, y2: bottom, stroke: '#888'}));
  g.append(el('svg:line', {x1: LEFT, x2: W - RIGHT, y1: bottom, y2: bottom, stroke: '#888'}));
  return g;
}

// xLabels labels the x-axis at its ends: the time since the history's
// first event, or the events, and says which.
function xLabels(g, t, z0, z1, n, ly) {
  if (!n) return;
  let a = 'event ' + t.index[z0], b = 'event ' + t.index[z1], what = 'x-axis: events';
  if (timed(t)) {
    const t0 = summary.timeline.time[0];
    a = '+' + fmtTime(t.time[z0] - t0);
    b = '+' + fmtTime(t.time[z1] - t0);
    what = 'x-axis: time since the first event';
  } else if (summary.axis !== 'time') {
    what = 'x-axis: events (the file has no times, or not in order)';
  }
  g.append(el('svg:text', {x: LEFT, y: ly}, a));
  g.append(el('svg:text', {class: 'x-axis-label', x: LEFT + (W - LEFT - RIGHT) / 2, y: ly, 'text-anchor': 'middle'}, what));
  g.append(el('svg:text', {x: W - RIGHT, y: ly, 'text-anchor': 'end'}, b));
}

// drawStepTicks marks where each training step began, when few enough
// are in view to tell apart.
function drawStepTicks(svg, t, z0, z1, x, top, bottom) {
  const st = summary.steps, g = el('svg:g', {id: 'step-ticks'});
  svg.append(g);
  if (!st || !t.index.length) return;
  const inView = st.steps.filter(p => p.begin >= t.index[z0] && p.begin <= t.index[z1]);
  if (inView.length > 100) return;
  for (const p of inView) {
    const sx = x(firstPoint(t, p.begin));
    const line = el('svg:line', {class: 'steptick', 'data-step': p.step, x1: sx, x2: sx, y1: top, y2: bottom});
    line.append(el('svg:title', {}, `step ${p.step} begins (event ${p.begin})`));
    g.append(line);
  }
}

// drawReserved draws the cached-segment timeline: reserved memory by
// segment over the points the active timeline shows.
function drawReserved() {
  const svg = $('reserved'), RH = 200, RT = 10, RB = 30;
  svg.replaceChildren();
  const {r, z0, z1} = view;
  if (!r || !r.index.length) return;
  const n = z1 - z0 + 1, pw = W - LEFT - RIGHT, ph = RH - RT - RB;
  const shown = r.total.slice(z0, z1 + 1), maxY = Math.max(1, ...shown);
  // the active timeline's points, so the two line up (and its times)
  const px = xPositions(view.t, z0, z1, LEFT, pw), xs = n > 1 ? px : [LEFT, LEFT + pw];
  const y = v => RT + ph - v * ph / maxY;
  const at = j => Math.min(z0 + j, z1);
  const g = el('svg:g', {id: 'reserved-series'}), bottom = new Array(r.index.length).fill(0);
  for (const se of r.series) {
    const top = bottom.map((b, k) => b + se.values[k]);
    const up = xs.map((xv, j) => `${xv.toFixed(1)},${y(top[at(j)]).toFixed(1)}`);
    const down = xs.map((xv, j) => `${xv.toFixed(1)},${y(bottom[at(j)]).toFixed(1)}`).reverse();
    const poly = el('svg:polygon', {'data-key': se.key, fill: se.color, 'fill-opacity': 0.6, points: up.concat(down).join(' ')});
    poly.append(el('svg:title', {}, se.label));
    g.append(poly);
    top.forEach((v, k) => { bottom[k] = v; });
  }
  svg.append(g);
  // the active memory over it, as a line: the gap is the cache
  const act = view.t.total;
  svg.append(el('svg:polyline', {id: 'reserved-active', fill: 'none', stroke: '#222', 'stroke-width': 1,
    points: xs.map((xv, j) => `${xv.toFixed(1)},${y(act[at(j)]).toFixed(1)}`).join(' ')}));
  const ax = yAxis(maxY, y, RT, RT + ph);
  xLabels(ax, view.t, z0, z1, n, RH - 8);
  svg.append(ax);
  $('reserved-peak').textContent = fmt(Math.max(...shown));
  $('reserved-peak').setAttribute('data-bytes', Math.max(...shown));
}

// drawSteps draws the peak of each training step as a bar (red for the
// steps at the end that each peaked higher than the one before: a leak).
function drawSteps(s) {
  const st = s.steps, svg = $('steps');
  svg.replaceChildren();
  const count = st ? st.count : 0;
  $('steps-section').setAttribute('data-count', count);
  $('step-leak').hidden = true;
  if (!count) {
    $('step-summary').textContent = 'No training steps are marked in this history (headroom train marks each step while it records the history).';
    svg.setAttribute('visibility', 'hidden');
    return;
  }
  svg.setAttribute('visibility', 'visible');
  const list = st.steps, SH = 160, ST = 10, SB = 24, pw = W - LEFT - RIGHT, ph = SH - ST - SB;
  const maxY = Math.max(1, ...list.map(p => p.peak)), minP = Math.min(...list.map(p => p.peak));
  const y = v => ST + ph - v * ph / maxY, bw = pw / list.length;
  $('step-summary').textContent = `${count} steps` + (list.length < count ? ` (in ${list.length} groups of consecutive steps, each shown by its highest peak)` : '') +
    `; step peaks from ${fmt(minP)} to ${fmt(maxY)}.`;
  $('step-summary').setAttribute('data-rising', st.rising);
  if (st.rising >= 2) {
    const p = $('step-leak');
    p.hidden = false;
    p.textContent = `The peak rose in each of the last ${st.rising} steps, by ${fmt(st.rise_bytes)} in all: each step keeps memory it does not give back (a leak).`;
    p.setAttribute('data-bytes', st.rise_bytes);
  }
  const g = el('svg:g', {id: 'step-bars'});
  list.forEach((p, k) => {
    const rising = st.rising >= 2 && list.length === count && k >= count - st.rising;
    const rect = el('svg:rect', {x: (LEFT + k * bw).toFixed(1), y: y(p.peak).toFixed(1), width: Math.max(0.5, bw - (bw > 3 ? 1 : 0)).toFixed(1),
      height: (ST + ph - y(p.peak)).toFixed(1), fill: '#4e79a7', class: rising ? 'rising' : '', 'data-step': p.step, 'data-peak': p.peak, 'data-start': p.start});
    const which = p.last > p.step ? `steps ${p.step} to ${p.last}` : `step ${p.step}`;
    rect.append(el('svg:title', {}, `${which}: peak ${fmt(p.peak)} after event ${p.peak_event}, ${fmt(p.start)} held when it began` +
      (p.dur_us ? `, ${fmtTime(p.dur_us)}` : '')));
    rect.onclick = () => { zoom = [p.begin, p.end]; applyZoom().catch(fail); select(p.peak_event, true); };
    g.append(rect);
    // what the step began with: memory earlier steps left allocated
    g.append(el('svg:line', {x1: (LEFT + k * bw).toFixed(1), x2: (LEFT + (k + 1) * bw).toFixed(1), y1: y(p.start).toFixed(1), y2: y(p.start).toFixed(1), stroke: '#222'}));
  });
  svg.append(g);
  const ax = yAxis(maxY, y, ST, ST + ph);
  ax.append(el('svg:text', {x: LEFT, y: SH - 6}, 'step ' + list[0].step));
  ax.append(el('svg:text', {x: LEFT + pw / 2, y: SH - 6, 'text-anchor': 'middle'}, 'bars: each step\'s peak; black: what it began with'));
  ax.append(el('svg:text', {x: W - RIGHT, y: SH - 6, 'text-anchor': 'end'}, 'step ' + list[list.length - 1].last));
  svg.append(ax);
}

// drawMinimap draws the whole history small, with the zoomed range as a
// brush: dragging across it zooms the timeline to what was dragged over.
function drawMinimap(t) {
  const svg = $('minimap'), MH = 50, all = t.index.length;
  svg.replaceChildren();
  const pw = W - LEFT - RIGHT, maxY = Math.max(1, ...t.total);
  const mx = all ? xPositions(t, 0, all - 1, LEFT, pw) : [];
  const x = k => all ? mx[Math.max(0, Math.min(all - 1, k))] : LEFT;
  const pts = t.total.map((v, k) => `${x(k).toFixed(1)},${(MH - 2 - v * (MH - 6) / maxY).toFixed(1)}`);
  svg.append(el('svg:polyline', {points: pts.join(' '), fill: 'none', stroke: '#555'}));
  const z0 = firstPoint(t, zoom[0]), z1 = lastPoint(t, zoom[1]);
  const brush = el('svg:rect', {id: 'brush', class: 'brush', x: x(z0), y: 1, width: Math.max(2, x(z1) - x(z0)), height: MH - 2,
    'data-from': zoom[0], 'data-to': zoom[1]});
  svg.append(brush);
  const toK = ev => {
    const r = svg.getBoundingClientRect();
    const vx = (ev.clientX - r.left) * W / r.width;
    return nearest(mx, vx);
  };
  let from = null;
  svg.onpointerdown = ev => { from = toK(ev); svg.setPointerCapture(ev.pointerId); };
  svg.onpointermove = ev => {
    if (from === null) return;
    const k = toK(ev);
    brush.setAttribute('x', x(Math.min(from, k)));
    brush.setAttribute('width', Math.max(2, Math.abs(x(k) - x(from))));
  };
  svg.onpointerup = ev => {
    if (from === null) return;
    const k = toK(ev), a = from;
    from = null;
    if (a === k) { // a click: centre the zoomed range there
      const w = z1 - z0, from = Math.max(0, Math.min(k - Math.floor(w / 2), all - 1 - w));
      setZoom(from, from + w);
    } else setZoom(a, k);
  };
}

function showBand(s) {
  side(s.label, s.stack ? 'stack, innermost first:' : 'a band of many allocations: no one stack', s.stack || '', {key: s.key});
}

// side shows what is selected: a band's or an event's stack (or module path).
function side(title, desc, stack, attrs) {
  $('side-title').textContent = title;
  $('side-desc').textContent = desc;
  $('side-stack').textContent = stack;
  const a = $('side');
  for (const k of ['data-key', 'data-event']) a.removeAttribute(k);
  for (const [k, v] of Object.entries(attrs || {})) a.setAttribute('data-' + k, v);
}

// The event list: a page of events around the selected one, selected with
// a click or the arrow keys.
let listFrom = -1, listRows = [];
async function eventList(i = 0) {
  const PAGE = 200, from = Math.floor(i / PAGE) * PAGE;
  if (from === listFrom) return markSelected(i);
  listFrom = from;
  const ev = await getJSON(`/api/events?device=${summary.device}&from=${from}`).catch(fail);
  if (!ev || listFrom !== from) return;
  listRows = ev.rows;
  const ul = $('event-list');
  ul.replaceChildren(...ev.rows.map(r => {
    const li = el('li', {role: 'option', 'data-event': r.index, 'aria-selected': 'false', class: r.action === 'oom' ? 'oom' : ''},
      `${r.desc} → ${fmt(r.active)} active`);
    li.onclick = () => select(r.index, true);
    return li;
  }));
  $('event-list-range').textContent = ev.rows.length ? `${ev.rows[0].index} to ${ev.rows[ev.rows.length - 1].index} of ${ev.events}` : '(none recorded)';
  markSelected(Number($('event-input').value)); // the selection may have moved while the page loaded
}
function markSelected(i) {
  const ul = $('event-list');
  for (const li of ul.children) {
    const on = Number(li.getAttribute('data-event')) === i;
    li.setAttribute('aria-selected', on);
    // scroll the list only, not the page
    if (on) ul.scrollTop = Math.max(0, li.offsetTop - ul.offsetTop - ul.clientHeight / 2);
  }
}
$('event-list').onkeydown = ev => {
  const cur = Number($('event-input').value), step = {ArrowDown: 1, ArrowUp: -1, PageDown: 20, PageUp: -20}[ev.key];
  if (step === undefined) return;
  ev.preventDefault();
  select(cur + step, true);
};

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

// moveCursor puts the timeline's cursor on event i (hidden when zoomed
// away from it).
function moveCursor(i) {
  const {t, z0, z1} = view, c = $('cursor');
  if (!c || !t.index.length) return;
  const k = firstPoint(t, i);
  const cx = view.xs && view.xs.length ? view.xs[Math.max(0, Math.min(view.xs.length - 1, k - z0))] : LEFT;
  c.setAttribute('x1', cx); c.setAttribute('x2', cx);
  c.setAttribute('visibility', i >= t.index[z0] && i <= t.index[z1] ? 'visible' : 'hidden');
}

let pending = 0;
// select shows the state after event i; shown (a choice of the user's)
// also puts the event in the side pane.
async function select(i, shown) {
  const s = summary;
  i = Math.max(0, Math.min(i, Math.max(0, s.events - 1)));
  $('event-slider').value = i;
  $('event-input').value = i;
  moveCursor(i);
  eventList(i);
  const ticket = ++pending;
  const st = await getJSON(`/api/state?device=${s.device}&event=${i}`).catch(fail);
  if (st && ticket === pending) {
    drawState(st);
    if (shown) side('Event ' + st.event, st.desc, st.stack || 'no stack recorded', {event: st.event});
  }
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
