/* app.js - attnd's page: edit an attention request, send it to this attnd,
 * draw the weights it answers as heatmaps.
 *
 * Plain JavaScript, no build step, no library, nothing fetched but this
 * attnd's own routes (GET /v2, GET /v1/models, POST /v1/attention and
 * POST /v2/models/{m}/infer).  The Content-Security-Policy attnd sends
 * allows no inline script or style: every element is made here with DOM
 * calls, sizes go through CSS custom properties.
 *
 * Drawing: each heatmap is one canvas whose pixels are written at once
 * (ImageData): a cell is a square of pixels, up to 1024 x 1024 cells at one
 * pixel per cell; above that the canvas stays 1024 pixels wide (or high)
 * and each pixel shows the largest weight of the block of cells it covers
 * (the page says so above the heatmaps; hovering still shows exact cells).
 * Colours: viridis (perceptually uniform), from 0 to the largest weight of
 * the answer (global) or of each row (per row).  Cells blocked by causal,
 * the sliding window, attn_mask (true, or a number of -1e9 or less),
 * key_padding_mask or key_lengths are drawn hatched in grey, which no viridis colour is, so a
 * blocked cell is never mistaken for a weight of 0.  One heatmap is drawn
 * per task (the page stays responsive between them) and the time each
 * takes is kept in window.attnd.lastDraw.
 *
 * Test hooks (stable): window.attnd (below: status, settled, heatmaps,
 * hover, selectedRow, lastDraw, error, curl, exports...), body[data-state]
 * ("loading", "ready", "running", "drawing", "done", "error") and
 * body[data-settled] (a count: wait for it to grow after Run), and on the
 * elements: figure.hm[data-heatmap][data-head][data-rows][data-cols]
 * [data-blocked], #tip[data-row][data-col][data-weight], error messages
 * p.err[data-error-for][data-field].
 */
'use strict';

(function () {
  /* ---- constants ------------------------------------------------------ */

  // viridis at 17 evenly spaced points (0, 16, ..., 240, 255 of 256);
  // the 256 colours used are interpolated between them
  const VIRIDIS = ['440154', '48186a', '472d7b', '424086', '3b528b', '33638d',
    '2c728e', '26828e', '21918c', '1fa088', '28ae80', '3fbc73', '5ec962',
    '84d44b', 'addc30', 'd8e219', 'fde725'];
  const HATCH_LIGHT = [0xd9, 0xd9, 0xd9];
  const HATCH_DARK = [0x8c, 0x8c, 0x8c];
  const NONFINITE = [0xff, 0x00, 0xff]; // a null (non-finite) weight
  const MAX_PX = 1024;       // canvas pixels per side; more cells: downsampled
  const FIT_PX = 300;        // small heatmaps: cells sized to about this
  const MAX_CELL = 36;       // CSS pixels per cell at most
  const BIG_CSS = 360;       // CSS size of heatmaps with more than FIT_PX cells
  const LABEL_CELL = 12;     // token labels from this many CSS pixels per cell
  const GRID_MAX = 600;      // numbers per tensor in the grid editor
  const TOKEN_BAR_MAX = 64;  // query-token buttons up to this many rows
  const MASK_BLOCKS = -1e9;  // a numeric mask at or below this is drawn blocked
  const OUT_ROWS = 64, OUT_COLS = 24;

  const V1 = '/v1/attention';

  /* ---- state: the test hook ------------------------------------------ */

  const state = {
    hookVersion: 1,
    status: 'loading',
    settled: 0,            // how many times status became "done" or "error"
    server: null,          // {name, version} from GET /v2
    models: [],            // GET /v1/models
    presets: [],           // [{id, label}]
    preset: null,          // id of the preset loaded last
    endpoint: V1,
    request: null,         // the body last sent (object)
    requestText: null,     // ... and its exact text
    response: null,        // the answer (object)
    responseText: null,    // ... and its exact text
    view: null,            // {B, H, Lq, Lk, averaged, batch}
    heatmaps: [],          // [{index, head, title, rows, cols, canvasWidth, ...}]
    selectedRow: null,
    hover: null,           // {heatmap, head, row, col, weight, query, key, blocked}
    lastDraw: null,        // {heatmaps, pixels, drawMs, perHeatmapMs, maxStepMs, totalMs}
    timing: null,          // {queue_ms, compute_ms, total_ms, roundTripMs, parseMs}
    error: null,           // {status, message, field, slot}
    curl: null,
    exports: {},           // {png: {bytes, width, height}, json: {bytes}}
    run: () => run(),
    cell: (k, i, j) => cellInfo(k, i, j),
  };
  window.attnd = state;

  let body = {};           // the request being edited
  let labels = null;       // labels a v2 preset brings: {tokens, key}
  let mats = [];           // per heatmap: {w, mask, Lq, Lk, rowMax, ...}
  let norm = null;         // the answer, normalized (see normalize)
  let inflight = null;     // AbortController of the request running
  let drawSeq = 0;
  let cursor = null;       // keyboard cursor {k, i, j}
  const $ = (id) => document.getElementById(id);

  function setStatus(s) {
    state.status = s;
    if (s === 'done' || s === 'error') state.settled++;
    document.body.dataset.state = s;
    document.body.dataset.settled = String(state.settled);
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  /* ---- colours -------------------------------------------------------- */

  const LUT = new Uint32Array(256);
  const LUT_RGB = [];
  (function buildLut() {
    const stops = VIRIDIS.map((h) => [0, 2, 4].map((k) => parseInt(h.slice(k, k + 2), 16)));
    const at = [0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 255];
    for (let n = 0; n < 256; n++) {
      let s = 0;
      while (s < at.length - 2 && n > at[s + 1]) s++;
      const t = (n - at[s]) / (at[s + 1] - at[s]);
      const c = [0, 1, 2].map((k) => Math.round(stops[s][k] + t * (stops[s + 1][k] - stops[s][k])));
      LUT_RGB.push(c);
      LUT[n] = pack(c);
    }
  })();
  function pack(c) { return ((255 << 24) | (c[2] << 16) | (c[1] << 8) | c[0]) >>> 0; }
  const PX_HATCH_LIGHT = pack(HATCH_LIGHT), PX_HATCH_DARK = pack(HATCH_DARK);
  const PX_NONFINITE = pack(NONFINITE);

  /* ---- small helpers -------------------------------------------------- */

  function rng(seed) { // mulberry32: the presets' numbers, the same every time
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  // rows x cols numbers in [-mag, mag) with `digits` decimals
  function randMatrix(rows, cols, seed, digits, mag) {
    const r = rng(seed), f = Math.pow(10, digits), a = mag || 1;
    const m = [];
    for (let i = 0; i < rows; i++) {
      const row = [];
      for (let j = 0; j < cols; j++) row.push(Math.round((r() * 2 - 1) * a * f) / f);
      m.push(row);
    }
    return m;
  }
  const round3 = (x) => Math.round(x * 1000) / 1000;
  const prod = (a) => a.reduce((p, x) => p * x, 1);
  const label = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

  function shapeOf(a) {
    const s = [];
    let x = a;
    while (Array.isArray(x)) { s.push(x.length); x = x[0]; }
    return s;
  }
  // Flatten a nested array of the given shape; null when it is ragged.
  function flatten(a, shape) {
    const out = [];
    let ok = true;
    (function walk(x, d) {
      if (!ok) return;
      if (d === shape.length) {
        if (Array.isArray(x)) ok = false; else out.push(x);
        return;
      }
      if (!Array.isArray(x) || x.length !== shape[d]) { ok = false; return; }
      for (const y of x) walk(y, d + 1);
    })(a, 0);
    return ok ? out : null;
  }
  function unflatten(flat, shape) {
    let k = 0;
    return (function build(d) {
      if (d === shape.length) return flat[k++];
      const a = [];
      for (let i = 0; i < shape[d]; i++) a.push(build(d + 1));
      return a;
    })(0);
  }
  // Numbers of a nested or flat array into a Float64Array of n values
  // (null, a non-finite value in attnd's answers, becomes NaN).
  function toF64(a, n) {
    const out = new Float64Array(n);
    let k = 0;
    (function walk(x) {
      for (let i = 0; i < x.length; i++) {
        const y = x[i];
        if (Array.isArray(y)) walk(y);
        else out[k++] = y === null ? NaN : y;
      }
    })(a);
    if (k !== n) throw new Error('attn_weights has ' + k + ' numbers, its shape says ' + n);
    return out;
  }

  // JSON laid out for reading: one matrix row a line.
  function fmt(v, ind) {
    ind = ind || '';
    if (Array.isArray(v)) {
      if (v.every((x) => x === null || typeof x !== 'object')) {
        return '[' + v.map((x) => JSON.stringify(x)).join(', ') + ']';
      }
      const inner = ind + ' ';
      return '[' + v.map((x, k) => (k ? inner : '') + fmt(x, inner)).join(',\n') + ']';
    }
    if (v && typeof v === 'object') {
      const keys = Object.keys(v);
      if (!keys.length) return '{}';
      const inner = ind + '  ';
      return '{\n' + keys.map((k) => inner + JSON.stringify(k) + ': ' + fmt(v[k], inner)).join(',\n') +
        '\n' + ind + '}';
    }
    return JSON.stringify(v);
  }

  function authHeaders() {
    const key = $('api-key').value.trim();
    return key ? { Authorization: 'Bearer ' + key } : {};
  }

  /* ---- presets -------------------------------------------------------- */

  function catPreset() {
    // hand-made embeddings: determiners, nouns, a verb, a preposition
    const emb = {
      The: [2, 0, 0, 0.3], cat: [0, 2.4, 1, 0], sat: [0, 1, 2.4, 0.2],
      on: [0.5, 0, 0.5, 2.2], the: [2, 0, 0, 0.7], mat: [0, 2, 0.3, 1],
    };
    const tokens = ['The', 'cat', 'sat', 'on', 'the', 'mat'];
    return {
      body: { query: tokens.map((t) => emb[t]), tokens: tokens },
      note: 'Self-attention with one head: query = key = value, softmax(Q K\u1d40 / \u221ad) V.',
    };
  }

  function causalPreset() {
    const tokens = ['<s>', 'I', 'think', 'therefore', 'I', 'am'];
    return {
      body: { query: randMatrix(6, 8, 7, 2, 2), num_heads: 2, causal: true, tokens: tokens },
      note: 'A decoder: each token sees only itself and the tokens before it (hatched: blocked by causal).',
    };
  }

  function windowPreset() {
    const tokens = ['Once', 'upon', 'a', 'time', 'there', 'lived', 'a', 'small', 'cat', 'who', 'sat', 'still'];
    return {
      body: { query: randMatrix(12, 8, 9, 2, 2), num_heads: 2, causal: true, window: [3, 0], tokens: tokens },
      note: 'A sliding window (Mistral-style): each token sees itself and the 3 before it ' +
        '(hatched: outside the window, or after the token).',
    };
  }

  function paddingPreset() {
    return {
      body: {
        query: [randMatrix(5, 4, 11, 2, 2), randMatrix(5, 4, 12, 2, 2)],
        num_heads: 2,
        key_padding_mask: [[false, false, false, false, true], [false, false, false, true, true]],
        tokens: [['the', 'cat', 'sat', 'down', '<pad>'], ['a', 'dog', 'ran', '<pad>', '<pad>']],
      },
      note: 'A batch of two sequences padded to 5: key_padding_mask blocks the padding keys (choose the sequence under Answer).',
    };
  }

  function crossPreset() {
    // head 1 matches meanings (one dimension per word), head 2 positions
    const sense = { the: 0, cat: 1, sat: 2, on: 3, mat: 4 };
    const en = ['the', 'cat', 'sat', 'on', 'the', 'mat'];
    const fr = ['le', 'chat', "s'est", 'assis', 'sur', 'le', 'tapis'];
    const frSense = ['the', 'cat', 'sat', 'sat', 'on', 'the', 'mat'];
    const pos = (x) => [Math.cos(x * 0.9), Math.sin(x * 0.9), Math.cos(x * 0.45), Math.sin(x * 0.45), 1]
      .map((v) => round3(v * 1.5));
    const word = (w, s) => { const v = [0, 0, 0, 0, 0]; v[sense[w]] = s; return v; };
    const key = en.map((w, j) => word(w, 2.5).concat(pos(j)));
    const query = fr.map((w, i) => word(frSense[i], i === 2 ? 1.6 : 2.5).concat(pos(i * 5 / 6)));
    return {
      body: { query: query, key: key, num_heads: 2, tokens: fr, key_tokens: en },
      note: 'Cross-attention: French target tokens (rows) attend to the English source (columns); head 0 follows meaning, head 1 position.',
    };
  }

  function gqaPreset() {
    const H = 4, Hkv = 2, L = 5, D = 4;
    const flat = (seed, n) => randMatrix(1, n, seed, 2, 2.5)[0];
    return {
      endpoint: '/v2/models/sdpa/infer',
      body: {
        inputs: [
          { name: 'query', datatype: 'FP32', shape: [H, L, D], data: flat(21, H * L * D) },
          { name: 'key', datatype: 'FP32', shape: [Hkv, L, D], data: flat(22, Hkv * L * D) },
          { name: 'value', datatype: 'FP32', shape: [Hkv, L, D], data: flat(23, Hkv * L * D) },
        ],
        parameters: { causal: false },
        outputs: [{ name: 'attn_output' }, { name: 'attn_weights' }],
      },
      labels: { tokens: ['we', 'share', 'keys', 'across', 'heads'] },
      note: 'Grouped-query attention through KServe v2: 4 query heads share 2 key/value heads (heads 0-1 use kv head 0, heads 2-3 kv head 1).',
    };
  }

  function modelPreset(m) {
    const tokens = ['the', 'model', 'reads', 'its', 'own', 'input'];
    return {
      body: { model: m.name, query: randMatrix(tokens.length, m.embed_dim, 31, 2, 2), tokens: tokens },
      note: 'Resident model "' + m.name + '": ' + (m.description || '') +
        ' (' + m.num_heads + ' heads, embed_dim ' + m.embed_dim + '; its own projections).',
    };
  }

  function largePreset(L, D, H, seed) {
    return function () {
      return {
        body: { query: randMatrix(L, D, seed, 2, 2), num_heads: H, causal: true },
        colour: 'row',
        note: L + ' \u00d7 ' + L + ' weights per head, ' + H + ' head' + (H > 1 ? 's' : '') +
          ', random query, causal' + (L > MAX_PX ? ': more cells than pixels, so drawn downsampled.' : '.'),
      };
    };
  }

  const PRESETS = [
    { id: 'cat', label: 'The cat sat on the mat (1 head)', make: catPreset },
    { id: 'causal', label: 'Causal decoder (2 heads)', make: causalPreset },
    { id: 'window', label: 'Sliding window of 3 (causal, 2 heads)', make: windowPreset },
    { id: 'padding', label: 'Padding mask (batch of 2)', make: paddingPreset },
    { id: 'cross', label: 'Cross-attention, French \u2192 English', make: crossPreset },
    { id: 'gqa', label: 'Grouped-query (v2, 4 heads, 2 kv heads)', make: gqaPreset },
    { id: 'large', label: 'Large: 1024 \u00d7 1024, 4 heads', make: largePreset(1024, 32, 4, 41) },
    { id: 'larger', label: 'Larger: 2048 \u00d7 2048 (downsampled)', make: largePreset(2048, 8, 1, 43) },
  ];

  function fillPresets() {
    const sel = $('preset');
    const list = PRESETS.slice(0, 6);
    for (const m of state.models) {
      if (m.embed_dim > 0) {
        list.push({ id: 'model-' + m.name, label: 'Resident model: ' + m.name + ' (' + m.num_heads + ' heads)',
          make: () => modelPreset(m) });
      }
    }
    list.push(...PRESETS.slice(6));
    const keep = sel.value;
    sel.replaceChildren(...list.map((p) => el('option', { value: p.id, text: p.label })));
    if (keep && list.some((p) => p.id === keep)) sel.value = keep;
    state.presets = list.map((p) => ({ id: p.id, label: p.label }));
    fillPresets.list = list;

    const ep = $('endpoint');
    const eps = [V1, '/v2/models/sdpa/infer', '/v2/models/mha/infer']
      .concat(state.models.filter((m) => m.embed_dim > 0).map((m) => '/v2/models/' + m.name + '/infer'));
    const keepEp = ep.value;
    ep.replaceChildren(...eps.map((e) => el('option', { value: e, text: 'POST ' + e })));
    if (keepEp) ep.value = keepEp;
  }

  function loadPreset(id) {
    const p = (fillPresets.list || []).find((x) => x.id === id) || fillPresets.list[0];
    const made = p.make();
    state.preset = p.id;
    $('preset').value = p.id;
    body = made.body;
    labels = made.labels || null;
    setEndpoint(made.endpoint || V1);
    $('preset-note').textContent = made.note || '';
    $('colour-scale').value = made.colour || 'global';
    clearErrors();
    writeJson();
    syncControls();
    renderGrids();
  }

  function setEndpoint(e) {
    state.endpoint = e;
    $('endpoint').value = e;
  }
  const isV2 = () => state.endpoint.startsWith('/v2/');

  /* ---- the editor: JSON, controls, grids ------------------------------ */

  function writeJson() {
    $('json').value = fmt(body);
    clientError('json', null);
  }

  function readJson() { // the textarea into body; false when it is not JSON
    const text = $('json').value;
    try {
      const v = JSON.parse(text);
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('the body must be a JSON object');
      body = v;
      clientError('json', null);
      return true;
    } catch (e) {
      clientError('json', 'JSON: ' + e.message + ' (not sent)');
      return false;
    }
  }

  function params() { // where causal and scale live
    if (!isV2()) return body;
    if (!body.parameters || typeof body.parameters !== 'object') body.parameters = {};
    return body.parameters;
  }

  function syncControls() {
    const v2 = isV2();
    const heads = $('ctl-heads');
    heads.disabled = v2 || typeof body.model === 'string';
    if (v2) {
      const q = (body.inputs || []).find((i) => i && i.name === 'query');
      heads.value = q && Array.isArray(q.shape) && q.shape.length >= 3 ? q.shape[q.shape.length - 3] : '';
      heads.title = 'v2: the heads come from the shape of query';
    } else if (typeof body.model === 'string') {
      const m = state.models.find((x) => x.name === body.model);
      heads.value = m ? m.num_heads : '';
      heads.title = 'a resident model has its own number of heads';
    } else {
      heads.value = body.num_heads === undefined ? 1 : body.num_heads;
      heads.title = '';
    }
    const p = v2 ? body.parameters || {} : body;
    $('ctl-causal').checked = p.causal === true;
    $('ctl-scale').value = p.scale === undefined ? '' : String(p.scale);
    const win = windowOf(v2, p);
    $('ctl-window-left').value = win ? String(win[0]) : '';
    $('ctl-window-right').value = win ? String(win[1]) : '';
    $('ctl-softcap').value = p.softcap === undefined ? '' : String(p.softcap);
    $('ctl-alibi').checked = p.alibi === true;
  }

  // The request's window as [left, right] (v1 "window", v2 window_left and
  // window_right; a side not given is 0), or null.
  function windowOf(v2, p) {
    if (!v2) return Array.isArray(p.window) && p.window.length === 2 ? p.window : null;
    if (p.window_left === undefined && p.window_right === undefined) return null;
    return [p.window_left === undefined ? 0 : p.window_left, p.window_right === undefined ? 0 : p.window_right];
  }

  function editBody(fn) { // a control or grid changed body: rewrite the JSON
    fn();
    $('json').value = fmt(body);
    clientError('json', null);
  }

  // The tensors the grid editor shows: {name, shape, flat, bool, write(flat)}
  function tensors() {
    const out = [];
    if (isV2()) {
      for (const inp of body.inputs || []) {
        if (!inp || !Array.isArray(inp.shape) || !Array.isArray(inp.data)) continue;
        const n = prod(inp.shape);
        const flat = inp.data.flat(Infinity);
        if (flat.length !== n) continue;
        out.push({ name: inp.name, shape: inp.shape.slice(), flat: flat,
          write: (f) => { inp.data = f.slice(); } });
      }
    } else {
      for (const name of ['query', 'key', 'value', 'attn_mask', 'key_padding_mask']) {
        const a = body[name];
        if (!Array.isArray(a)) continue;
        const shape = shapeOf(a);
        const flat = flatten(a, shape);
        out.push({ name: name, shape: shape, flat: flat,
          write: (f) => { body[name] = unflatten(f, shape); } });
      }
    }
    for (const t of out) t.bool = !!t.flat && t.flat.length > 0 && typeof t.flat[0] === 'boolean';
    return out;
  }

  function tokenLists() { // labels of the request's rows: {q: [...]|null per batch, k}
    if (isV2()) return { q: labels && labels.tokens, k: labels && (labels.key || labels.tokens) };
    const self = !Array.isArray(body.key);
    return { q: body.tokens || null, k: body.key_tokens || (self ? body.tokens : null) || null };
  }
  function batchLabels(list, b, n) { // one batch's labels, or null
    if (!Array.isArray(list)) return null;
    const l = Array.isArray(list[0]) ? list[b] : list;
    return Array.isArray(l) && l.length === n ? l.map(label) : null;
  }

  function renderGrids() {
    const pane = $('grid-pane');
    const blocks = [];
    const tl = tokenLists();
    for (const t of tensors()) {
      const err = el('p', { class: 'err', 'data-error-for': t.name, role: 'alert', hidden: true });
      const head = el('h3', {}, t.name + ' ', el('span', { class: 'muted', text: '[' + t.shape.join(', ') + ']' }));
      const box = el('div', { class: 'tensor', 'data-tensor': t.name }, head, err);
      if (!t.flat) {
        box.append(el('p', { class: 'big', text: 'not rectangular: edit it as JSON' }));
      } else if (t.flat.length > GRID_MAX) {
        box.append(el('p', { class: 'big', text: t.flat.length + ' numbers: too many for the grid; edit them as JSON' }));
      } else {
        box.append(gridTables(t, tl));
      }
      blocks.push(box);
    }
    if (!blocks.length) blocks.push(el('p', { class: 'muted', text: 'No tensor to show as a grid: edit the request as JSON.' }));
    pane.replaceChildren(...blocks);
  }

  function gridTables(t, tl) {
    const s = t.shape;
    const cols = s.length ? s[s.length - 1] : 1;
    const rows = s.length >= 2 ? s[s.length - 2] : 1;
    const slices = s.length > 2 ? prod(s.slice(0, -2)) : 1;
    const wrap = el('div', { class: 'scroll' });
    // v1 tensors of rank 3 are batches: slice b has the labels of batch b
    const batchOf = (b) => (!isV2() && s.length === 3 ? b : 0);
    for (let b = 0; b < slices; b++) {
      const lead = s.length > 2 ? unflatIndex(b, s.slice(0, -2)) : null;
      let rowLabels = null, colLabels = null;
      if (t.name === 'query') rowLabels = batchLabels(tl.q, batchOf(b), rows);
      if (t.name === 'key' || t.name === 'value') rowLabels = batchLabels(tl.k, batchOf(b), rows);
      if (t.name === 'attn_mask') {
        rowLabels = batchLabels(tl.q, 0, rows);
        colLabels = batchLabels(tl.k, 0, cols);
      }
      if (t.name === 'key_padding_mask') {
        colLabels = s.length === 1 ? batchLabels(tl.k, 0, cols) : null;
        rowLabels = s.length === 2 ? Array.from({ length: rows }, (_, i) => 'sequence ' + i) : ['blocked'];
      }
      const table = el('table', {});
      if (lead) table.append(el('caption', { class: 'muted', text: t.name + '[' + lead.join(', ') + ']' }));
      const hr = el('tr', {}, el('th', {}));
      for (let j = 0; j < cols; j++) hr.append(el('th', { text: colLabels ? colLabels[j] : String(j) }));
      table.append(hr);
      for (let i = 0; i < rows; i++) {
        const tr = el('tr', {}, el('th', { text: rowLabels ? rowLabels[i] : String(i) }));
        for (let j = 0; j < cols; j++) {
          const k = (b * rows + i) * cols + j;
          const name = t.name + '[' + (lead ? lead.join('][') + '][' : '') + (s.length >= 2 ? i + '][' : '') + j + ']';
          let input;
          if (t.bool) {
            input = el('input', { type: 'checkbox', 'aria-label': name + ' (checked = blocked)' });
            input.checked = t.flat[k] === true;
            input.addEventListener('change', () => {
              editBody(() => { t.flat[k] = input.checked; t.write(t.flat); });
            });
          } else {
            input = el('input', { type: 'text', inputmode: 'decimal', 'aria-label': name });
            input.value = String(t.flat[k]);
            input.addEventListener('change', () => {
              const v = Number(input.value.trim());
              if (input.value.trim() === '' || !Number.isFinite(v)) {
                input.setAttribute('aria-invalid', 'true');
                clientError(t.name, name + ': "' + input.value + '" is not a number (not changed)');
                return;
              }
              input.removeAttribute('aria-invalid');
              clientError(t.name, null);
              editBody(() => { t.flat[k] = v; t.write(t.flat); });
            });
          }
          tr.append(el('td', {}, input));
        }
        table.append(tr);
      }
      wrap.append(table);
    }
    return wrap;
  }

  function unflatIndex(k, shape) {
    const idx = [];
    for (let d = shape.length - 1; d >= 0; d--) { idx.unshift(k % shape[d]); k = Math.floor(k / shape[d]); }
    return idx;
  }

  /* ---- errors --------------------------------------------------------- */

  const KNOWN = ['query', 'key', 'value', 'num_heads', 'weights', 'model', 'causal', 'scale', 'window',
    'window_left', 'window_right', 'softcap', 'alibi', 'attn_mask',
    'key_padding_mask', 'need_weights', 'average_attn_weights', 'tokens', 'key_tokens', 'key_lengths',
    'w_q', 'w_k', 'w_v', 'w_o', 'b_q', 'b_k', 'b_v', 'b_o', 'inputs', 'outputs', 'parameters'];

  // The field an error message of attnd's names: its subject (the name it
  // starts with, as in "query[3]: ..." or "inputs[0] 'query': ..."), else
  // the first known name it quotes.  "unknown field 'x'" names no field of
  // the form: it goes next to the JSON.
  function fieldOf(msg) {
    if (/unknown (field|key|input|parameter|output)/.test(msg)) return 'json';
    const alias = (f) => (f === 'window_left' || f === 'window_right' ? 'window' : f);
    const lead = /^(?:inputs\[\d+\]\s*)?'?([A-Za-z_]+)'?(?=[[:'\s])/.exec(msg);
    if (lead && KNOWN.includes(lead[1])) return alias(lead[1]);
    const re = /'([A-Za-z_]+)'/g;
    let m;
    while ((m = re.exec(msg))) if (KNOWN.includes(m[1])) return alias(m[1]);
    return null;
  }

  function slotFor(field) {
    if (field) {
      const inGrid = !$('grid-pane').hidden &&
        document.querySelector('#grid-pane p.err[data-error-for="' + CSS.escape(field) + '"]');
      if (inGrid) return inGrid;
      const fixed = document.querySelector('#editor p.err[data-error-for="' + CSS.escape(field) + '"], ' +
        'header p.err[data-error-for="' + CSS.escape(field) + '"]');
      if (fixed) return fixed;
      if (field !== 'request') return $('err-json');
    }
    return $('err-request');
  }

  function clearErrors() {
    for (const p of document.querySelectorAll('p.err')) {
      p.hidden = true;
      p.textContent = '';
      delete p.dataset.field;
      delete p.dataset.status;
    }
    for (const c of document.querySelectorAll('[aria-invalid="true"]')) c.removeAttribute('aria-invalid');
    state.error = null;
  }

  // An error the server gave (status > 0) or a failed exchange: shown in
  // the server's words next to the field it names.
  function showError(status, message, field) {
    clearErrors();
    const slot = slotFor(field);
    slot.textContent = message;
    slot.dataset.field = field || '';
    slot.dataset.status = String(status || 0);
    slot.hidden = false;
    const ctl = { num_heads: 'ctl-heads', causal: 'ctl-causal', scale: 'ctl-scale', window: 'ctl-window-left',
      softcap: 'ctl-softcap', alibi: 'ctl-alibi', key: 'api-key', json: 'json' }[field];
    if (ctl) $(ctl).setAttribute('aria-invalid', 'true');
    state.error = { status: status, message: message, field: field || null, slot: slot.dataset.errorFor };
    if (slot.getBoundingClientRect().bottom > window.innerHeight) slot.scrollIntoView({ block: 'nearest' });
  }

  function clientError(slotName, message) { // the page's own complaint
    const slot = slotName === 'json' ? $('err-json')
      : document.querySelector('#grid-pane p.err[data-error-for="' + CSS.escape(slotName) + '"]') || $('err-json');
    slot.textContent = message || '';
    slot.hidden = !message;
    if (message) slot.dataset.field = slotName; else delete slot.dataset.field;
  }

  /* ---- running a request ---------------------------------------------- */

  async function run() {
    if (!readJson()) return; // the text is the request, in both modes
    const text = $('json').value;
    let req;
    try { req = JSON.parse(text); } catch (e) { clientError('json', 'JSON: ' + e.message + ' (not sent)'); return; }
    if (inflight) inflight.abort();
    const ac = new AbortController();
    inflight = ac;
    clearErrors();
    setStatus('running');
    $('run-status').textContent = 'running\u2026';
    const endpoint = state.endpoint;
    const t0 = performance.now();
    let res, answerText;
    try {
      res = await fetch(endpoint, {
        method: 'POST',
        headers: Object.assign({ 'Content-Type': 'application/json' }, authHeaders()),
        body: text,
        signal: ac.signal,
      });
      answerText = await res.text();
    } catch (e) {
      if (ac.signal.aborted) return;
      inflight = null;
      setStatus('error');
      $('run-status').textContent = '';
      showError(0, 'could not reach attnd: ' + e.message, 'request');
      return;
    }
    if (inflight !== ac) return;
    inflight = null;
    const t1 = performance.now();
    state.request = req;
    state.requestText = text;
    state.requestEndpoint = endpoint;
    let answer = null;
    try { answer = JSON.parse(answerText); } catch (e) { answer = null; }
    const t2 = performance.now();
    $('run-status').textContent = 'HTTP ' + res.status + ' in ' + (t1 - t0).toFixed(1) + ' ms';
    if (!res.ok) {
      setStatus('error');
      const msg = answer && typeof answer.error === 'string' ? answer.error
        : 'HTTP ' + res.status + ': ' + answerText.slice(0, 300);
      const field = res.status === 401 || res.status === 403 ? 'key' : fieldOf(msg);
      showError(res.status, msg, field);
      return;
    }
    if (!answer) {
      setStatus('error');
      showError(res.status, 'the answer is not JSON: ' + answerText.slice(0, 200), 'request');
      return;
    }
    state.response = answer;
    state.responseText = answerText;
    try {
      norm = normalize(endpoint.startsWith('/v2/'), req, answer);
    } catch (e) {
      setStatus('error');
      showError(res.status, String(e.message || e), 'request');
      return;
    }
    state.timing = Object.assign({}, answer.timing || {}, { roundTripMs: t1 - t0, parseMs: t2 - t1 });
    state.selectedRow = null;
    for (const b of ['export-png', 'export-json', 'copy-curl']) $(b).disabled = false;
    $('curl-box').hidden = true;
    fillBatches();
    await render();
  }

  // The answer as {B, H, Lq, Lk, averaged, w (all weights), out, outShape,
  // tokens, keyTokens, mask(b) -> Uint8Array|null}, for both protocols.
  function normalize(v2, req, ans) {
    let wShape, w, out = null, outShape = null, tokens = null, keyTokens = null;
    const p = v2 ? req.parameters || {} : req;
    const averaged = p.average_attn_weights === true;
    if (v2) {
      const wo = (ans.outputs || []).find((o) => o.name === 'attn_weights');
      if (!wo || !Array.isArray(wo.data)) throw new Error('the answer has no attn_weights to draw (ask for the output attn_weights, not as binary)');
      wShape = wo.shape;
      w = toF64(wo.data, prod(wShape));
      const oo = (ans.outputs || []).find((o) => o.name === 'attn_output');
      if (oo && Array.isArray(oo.data)) { out = oo.data.flat(Infinity); outShape = oo.shape; }
      tokens = labels && labels.tokens;
      keyTokens = labels && (labels.key || labels.tokens);
    } else {
      if (!ans.attn_weights) throw new Error('the answer has no attn_weights to draw ("need_weights": false?)');
      wShape = ans.shape.attn_weights;
      w = toF64(ans.attn_weights, prod(wShape));
      if (ans.output) { outShape = ans.shape.output; out = ans.output.flat(Infinity); }
      tokens = ans.tokens || null;
      keyTokens = ans.key_tokens || (Array.isArray(req.key) ? null : tokens);
    }
    const r = wShape.length;
    const Lq = wShape[r - 2], Lk = wShape[r - 1];
    const H = averaged || r < 3 ? 1 : wShape[r - 3];
    const B = prod(wShape.slice(0, Math.max(0, r - (averaged ? 2 : 3))));
    const n = { v2: v2, B: B, H: H, Lq: Lq, Lk: Lk, averaged: averaged, w: w, wShape: wShape, out: out,
      outShape: outShape, tokens: tokens, keyTokens: keyTokens };
    n.blocked = blockRules(v2, req, n);
    // grouped-query: how many key/value heads the query heads share
    let Hkv = H;
    if (v2) {
      const k = (req.inputs || []).find((x) => x && x.name === 'key');
      if (k && Array.isArray(k.shape) && k.shape.length >= 3 && /sdpa/.test(state.endpoint)) Hkv = k.shape[k.shape.length - 3];
    } else if (typeof req.model === 'string') {
      const m = state.models.find((x) => x.name === req.model);
      if (m && m.num_kv_heads) Hkv = m.num_kv_heads;
    }
    n.Hkv = Hkv > 0 && Hkv < H && H % Hkv === 0 ? Hkv : H;
    return n;
  }

  // Why (b, h, i, j) is blocked, from the request: 'causal', 'attn_mask',
  // 'key_padding_mask', 'key_lengths' or null.
  function blockRules(v2, req, n) {
    const p = v2 ? req.parameters || {} : req;
    const input = (name) => {
      if (!v2) {
        const a = req[name];
        if (!Array.isArray(a)) return null;
        const shape = shapeOf(a);
        const flat = flatten(a, shape);
        return flat ? { shape: shape, flat: flat } : null;
      }
      const inp = (req.inputs || []).find((x) => x && x.name === name);
      if (!inp || !Array.isArray(inp.data) || !Array.isArray(inp.shape)) return null;
      return { shape: inp.shape, flat: inp.data.flat(Infinity) };
    };
    const causal = p.causal === true || p.causal === 'bottom_right' || p.causal === 'top_left';
    const coff = p.causal === 'top_left' ? 0 : n.Lk - n.Lq;
    const off = n.Lk - n.Lq;
    const win = windowOf(v2, p);
    const am = input('attn_mask'), kpm = input('key_padding_mask'), kl = input('key_lengths');
    const isBlock = (v) => v === true || (typeof v === 'number' && v <= MASK_BLOCKS);
    const rules = [];
    if (causal) rules.push((b, h, i, j) => (j > i + coff ? 'causal' : null));
    if (win && Number.isInteger(win[0]) && Number.isInteger(win[1])) {
      const [l, r] = win;
      rules.push((b, h, i, j) => ((l >= 0 && j < i + off - l) || (r >= 0 && j > i + off + r) ? 'window' : null));
    }
    if (am) {
      const s = am.shape;
      if (s.length === 2 && s[0] === n.Lq && s[1] === n.Lk) {
        rules.push((b, h, i, j) => (isBlock(am.flat[i * n.Lk + j]) ? 'attn_mask' : null));
      } else if (s.length === 4 && s[2] === n.Lq && s[3] === n.Lk) {
        rules.push((b, h, i, j) => (isBlock(am.flat[(((b % s[0]) * s[1] + (h % s[1])) * n.Lq + i) * n.Lk + j])
          ? 'attn_mask' : null));
      }
    }
    if (kpm) {
      const s = kpm.shape;
      if (s[s.length - 1] === n.Lk) {
        const rowsB = s.length === 2 ? s[0] : 1;
        rules.push((b, h, i, j) => (isBlock(kpm.flat[(b % rowsB) * n.Lk + j]) ? 'key_padding_mask' : null));
      }
    }
    if (kl && kl.shape.length === 1) {
      rules.push((b, h, i, j) => (j >= kl.flat[b % kl.shape[0]] ? 'key_lengths' : null));
    }
    return function (b, h, i, j) {
      for (const r of rules) { const why = r(b, h, i, j); if (why) return why; }
      return null;
    };
  }

  /* ---- the heatmaps --------------------------------------------------- */

  function fillBatches() {
    const sel = $('batch');
    const B = norm.B;
    $('batch-ctl').hidden = B <= 1;
    sel.replaceChildren(...Array.from({ length: B }, (_, b) => el('option', { value: b, text: String(b) })));
    sel.value = '0';
  }

  function buildMats(b) {
    const { H, Lq, Lk, w, averaged } = norm;
    const n = Lq * Lk;
    const list = [];
    for (let h = 0; h < H; h++) {
      const off = (b * H + h) * n;
      const mask = maskOf(b, h);
      const kv = norm.Hkv < H ? ' (kv head ' + Math.floor(h / (H / norm.Hkv)) + ')' : '';
      list.push({ w: w.subarray(off, off + n), mask: mask, head: averaged ? 'mean' : h,
        title: averaged ? 'mean over heads (attnd)' : 'head ' + h + kv });
    }
    if (H > 1) {
      const mean = new Float64Array(n);
      for (const m of list) for (let k = 0; k < n; k++) mean[k] += m.w[k];
      for (let k = 0; k < n; k++) mean[k] /= H;
      let mask = null;
      if (list.every((m) => m.mask)) {
        mask = new Uint8Array(n);
        for (let k = 0; k < n; k++) mask[k] = list.every((m) => m.mask[k]) ? 1 : 0;
      }
      list.push({ w: mean, mask: mask, head: 'mean', title: 'mean over ' + H + ' heads', computed: true });
    }
    for (const m of list) {
      m.Lq = Lq; m.Lk = Lk;
      m.rowMax = new Float64Array(Lq);
      let blocked = 0;
      for (let i = 0; i < Lq; i++) {
        let mx = 0;
        for (let j = 0; j < Lk; j++) { const v = m.w[i * Lk + j]; if (v > mx) mx = v; }
        m.rowMax[i] = mx;
      }
      if (m.mask) for (let k = 0; k < n; k++) blocked += m.mask[k];
      m.blockedCount = blocked;
    }
    return list;
  }

  function maskOf(b, h) { // Uint8Array of blocked cells, or null when none is
    const { Lq, Lk } = norm;
    const mask = new Uint8Array(Lq * Lk);
    let any = 0;
    for (let i = 0; i < Lq; i++) {
      for (let j = 0; j < Lk; j++) {
        if (norm.blocked(b, h, i, j)) { mask[i * Lk + j] = 1; any = 1; }
      }
    }
    return any ? mask : null;
  }

  function geometry(Lq, Lk) {
    const maxL = Math.max(Lq, Lk);
    const dpr = Math.max(1, Math.round(window.devicePixelRatio || 1));
    if (maxL <= FIT_PX) {
      const cell = Math.max(1, Math.min(MAX_CELL, Math.floor(FIT_PX / maxL)));
      const scale = cell * dpr <= 64 && maxL * cell * dpr <= MAX_PX ? dpr : 1;
      return { cssCell: cell, cssW: Lk * cell, cssH: Lq * cell, pxW: Lk * cell * scale, pxH: Lq * cell * scale,
        downsampled: false };
    }
    const pxW = Math.min(Lk, MAX_PX), pxH = Math.min(Lq, MAX_PX);
    const css = BIG_CSS / Math.max(pxW, pxH);
    return { cssCell: BIG_CSS / maxL, cssW: Math.round(pxW * css), cssH: Math.round(pxH * css), pxW: pxW, pxH: pxH,
      downsampled: Lk > MAX_PX || Lq > MAX_PX };
  }

  async function render() {
    const seq = ++drawSeq;
    setStatus('drawing');
    const b = Number($('batch').value || 0);
    state.view = { B: norm.B, H: norm.H, Lq: norm.Lq, Lk: norm.Lk, averaged: norm.averaged, batch: b,
      protocol: norm.v2 ? 'v2' : 'v1' };
    mats = buildMats(b);
    const { Lq, Lk } = norm;
    const g = geometry(Lq, Lk);
    const qLabels = batchLabels(norm.tokens, b, Lq);
    const kLabels = batchLabels(norm.keyTokens, b, Lk);
    state.view.tokens = qLabels;
    state.view.keyTokens = kLabels;
    const global = $('colour-scale').value !== 'row';
    let vmax = 0;
    for (const m of mats) for (let i = 0; i < Lq; i++) if (m.rowMax[i] > vmax) vmax = m.rowMax[i];
    if (!(vmax > 0)) vmax = 1;
    state.view.vmax = vmax;
    state.view.scale = global ? 'global' : 'row';

    // the notes, legend and token bar
    const note = $('downsample-note');
    note.hidden = !g.downsampled;
    note.textContent = g.downsampled
      ? Lq + ' \u00d7 ' + Lk + ' weights are drawn on ' + g.pxH + ' \u00d7 ' + g.pxW +
        ' pixels: each pixel shows the largest weight of the ' + Math.ceil(Lq / g.pxH) + ' \u00d7 ' +
        Math.ceil(Lk / g.pxW) + ' block of cells it covers. Hovering shows the exact cell under the pointer.'
      : '';
    drawLegend(global ? vmax : null);
    renderTokenBar(qLabels);

    const figs = [];
    state.heatmaps = [];
    mats.forEach((m, k) => {
      const canvas = el('canvas', {
        width: g.pxW, height: g.pxH, tabindex: 0,
        'aria-label': m.title + ': attention weights, ' + Lq + ' query rows by ' + Lk +
          ' key columns. Arrow keys move over the cells, Enter highlights the row.',
      });
      canvas.style.setProperty('--w', g.cssW + 'px');
      canvas.style.setProperty('--h', g.cssH + 'px');
      const rowSel = el('div', { class: 'hm-row-sel', hidden: true });
      const cur = el('div', { class: 'hm-cursor', hidden: true });
      const wrap = el('div', { class: 'hm-wrap' }, canvas, rowSel, cur);
      wrap.style.setProperty('--w', g.cssW + 'px');
      const grid = el('div', { class: 'hm-grid' });
      grid.style.setProperty('--cell', g.cssCell + 'px');
      const withLabels = g.cssCell >= LABEL_CELL;
      grid.append(el('div', { class: 'hm-corner' }));
      if (withLabels) {
        const cols = el('div', { class: 'hm-cols', 'aria-hidden': 'true' });
        for (let j = 0; j < Lk; j++) cols.append(el('span', { text: kLabels ? kLabels[j] : String(j), title: kLabels ? kLabels[j] : null }));
        grid.append(cols);
        const rows = el('div', { class: 'hm-rows', 'aria-hidden': 'true' });
        for (let i = 0; i < Lq; i++) {
          rows.append(el('span', { text: qLabels ? qLabels[i] : String(i), 'data-row': i,
            onclick: () => selectRow(state.selectedRow === i ? null : i) }));
        }
        grid.append(rows);
      }
      grid.append(wrap);
      const cap = el('figcaption', {}, m.title + ' ',
        el('span', { class: 'muted', text: Lq + ' \u00d7 ' + Lk + (m.computed ? ', computed here' : '') }));
      const fig = el('figure', {
        class: 'hm', 'data-heatmap': k, 'data-head': m.head, 'data-rows': Lq, 'data-cols': Lk,
        'data-canvas-width': g.pxW, 'data-canvas-height': g.pxH, 'data-downsampled': g.downsampled ? 1 : 0,
        'data-blocked': m.blockedCount, 'data-batch': b,
      }, cap, grid);
      m.canvas = canvas; m.rowSel = rowSel; m.cursor = cur; m.fig = fig;
      m.rowLabels = withLabels ? grid.querySelectorAll('.hm-rows span') : null;
      canvas.addEventListener('mousemove', (e) => hoverAt(k, e));
      canvas.addEventListener('mouseleave', () => { if (!cursor || cursor.k !== k) hideTip(); });
      canvas.addEventListener('click', (e) => {
        const c = cellAt(k, e);
        if (c) selectRow(state.selectedRow === c.i ? null : c.i);
      });
      canvas.addEventListener('keydown', (e) => keyNav(k, e));
      canvas.addEventListener('focus', () => {
        const i0 = cursor && cursor.i !== undefined ? cursor.i : state.selectedRow || 0;
        cursor = { k: k, i: Math.min(i0, Lq - 1), j: Math.min(cursor ? cursor.j : 0, Lk - 1) };
        showCell(k, cursor.i, cursor.j, true);
      });
      canvas.addEventListener('blur', () => { cursor = cursor ? { i: cursor.i, j: cursor.j } : null; hideTip(); });
      state.heatmaps.push({ index: k, head: m.head, title: m.title, rows: Lq, cols: Lk, canvasWidth: g.pxW,
        canvasHeight: g.pxH, cssWidth: g.cssW, cssHeight: g.cssH, downsampled: g.downsampled,
        blocked: m.blockedCount, computed: !!m.computed });
      figs.push(fig);
    });
    $('heatmaps').replaceChildren(...figs);
    renderTiming();
    renderOutput(b);

    // draw, one heatmap per task
    const per = [];
    const start = performance.now();
    for (let k = 0; k < mats.length; k++) {
      if (seq !== drawSeq) return;
      const t0 = performance.now();
      paint(mats[k], g, global ? vmax : 0);
      per.push(performance.now() - t0);
      await new Promise((r) => setTimeout(r, 0));
    }
    if (seq !== drawSeq) return;
    const drawMs = per.reduce((a, x) => a + x, 0);
    state.lastDraw = {
      heatmaps: mats.length, rows: Lq, cols: Lk, canvasWidth: g.pxW, canvasHeight: g.pxH,
      pixels: g.pxW * g.pxH * mats.length, downsampled: g.downsampled,
      drawMs: drawMs, perHeatmapMs: per, maxStepMs: Math.max(...per), totalMs: performance.now() - start,
    };
    setStatus('done');
    renderTiming();
  }

  // Write the pixels of one heatmap: vmax > 0 colours against it (global),
  // vmax = 0 against each row's largest weight.
  function paint(m, g, vmax) {
    const { w, mask, Lq, Lk, rowMax } = m;
    const W = g.pxW, Hh = g.pxH;
    const ctx = m.canvas.getContext('2d');
    const img = ctx.createImageData(W, Hh);
    const px = new Uint32Array(img.data.buffer);
    const c0 = new Int32Array(W), c1 = new Int32Array(W);
    for (let x = 0; x < W; x++) {
      c0[x] = Math.floor(x * Lk / W);
      c1[x] = Math.max(c0[x] + 1, Math.floor((x + 1) * Lk / W));
    }
    let y = 0;
    for (let y0 = 0; y0 < Hh; y0 = y) {
      const i0 = Math.floor(y0 * Lq / Hh);
      // pixel rows y0..y-1 show the same cells: compute one, copy it
      y = y0 + 1;
      while (y < Hh && Math.floor(y * Lq / Hh) === i0) y++;
      const i1 = Math.max(i0 + 1, Math.floor(y * Lq / Hh));
      const line = y0 * W;
      for (let x = 0; x < W; x++) {
        let best = -1, any = false, nan = false;
        for (let i = i0; i < i1; i++) {
          const scale = vmax > 0 ? vmax : rowMax[i] > 0 ? rowMax[i] : 1;
          const base = i * Lk;
          for (let j = c0[x]; j < c1[x]; j++) {
            if (mask && mask[base + j]) continue;
            any = true;
            const v = w[base + j] / scale;
            if (v !== v) nan = true; else if (v > best) best = v;
          }
        }
        let c;
        if (!any) c = -1; // hatched
        else if (nan && best < 0) c = PX_NONFINITE;
        else c = LUT[best <= 0 ? 0 : best >= 1 ? 255 : (best * 255 + 0.5) | 0];
        if (c === -1) {
          for (let yy = y0; yy < y; yy++) px[yy * W + x] = (x + yy) % 6 < 2 ? PX_HATCH_LIGHT : PX_HATCH_DARK;
        } else {
          px[line + x] = c;
        }
      }
      // copy the first pixel row down, keeping the hatching diagonal
      for (let yy = y0 + 1; yy < y; yy++) {
        const dst = yy * W;
        for (let x = 0; x < W; x++) {
          const v = px[line + x];
          if (v !== PX_HATCH_LIGHT && v !== PX_HATCH_DARK) px[dst + x] = v;
        }
      }
    }
    ctx.putImageData(img, 0, 0);
  }

  function drawLegend(vmax) {
    const c = $('legend-bar');
    const ctx = c.getContext('2d');
    const img = ctx.createImageData(256, 1);
    new Uint32Array(img.data.buffer).set(LUT);
    ctx.putImageData(img, 0, 0);
    $('legend-max').textContent = vmax === null ? 'row max' : String(+vmax.toPrecision(4));
  }

  function renderTokenBar(qLabels) {
    const bar = $('tokens');
    if (!norm || norm.Lq > TOKEN_BAR_MAX) {
      bar.replaceChildren(el('span', { class: 'muted',
        text: 'Click a row of a heatmap (or press Enter on it) to highlight that query row in every head.' }));
      return;
    }
    const items = [el('span', { class: 'muted', text: 'Highlight the row of query token:' })];
    for (let i = 0; i < norm.Lq; i++) {
      items.push(el('button', { type: 'button', 'aria-pressed': 'false', 'data-row': i,
        text: qLabels ? qLabels[i] : String(i), onclick: () => selectRow(state.selectedRow === i ? null : i) }));
    }
    bar.replaceChildren(...items);
  }

  function selectRow(i) {
    state.selectedRow = i;
    for (const m of mats) {
      m.rowSel.hidden = i === null;
      if (i !== null) {
        m.rowSel.style.top = (100 * i / m.Lq) + '%';
        m.rowSel.style.height = 'max(3px, ' + (100 / m.Lq) + '%)';
      }
      m.fig.dataset.selectedRow = i === null ? '' : String(i);
      if (m.rowLabels) m.rowLabels.forEach((s, k) => s.classList.toggle('sel', k === i));
    }
    for (const btn of document.querySelectorAll('#tokens button')) {
      btn.setAttribute('aria-pressed', String(Number(btn.dataset.row) === i));
    }
  }

  function cellAt(k, e) {
    const m = mats[k];
    const cw = m.canvas.clientWidth, ch = m.canvas.clientHeight;
    if (!cw || !ch) return null;
    const j = Math.floor(e.offsetX / cw * m.Lk), i = Math.floor(e.offsetY / ch * m.Lq);
    if (i < 0 || j < 0 || i >= m.Lq || j >= m.Lk) return null;
    return { i: i, j: j };
  }

  function hoverAt(k, e) {
    const c = cellAt(k, e);
    if (!c) { hideTip(); return; }
    showCell(k, c.i, c.j, false, e.clientX, e.clientY);
  }

  function cellInfo(k, i, j) {
    const m = mats[k];
    if (!m || i < 0 || j < 0 || i >= m.Lq || j >= m.Lk) return null;
    const b = state.view.batch;
    let why = null;
    if (m.mask && m.mask[i * m.Lk + j]) {
      why = m.head === 'mean' ? 'blocked in every head' : norm.blocked(b, m.head, i, j);
    }
    const v = m.w[i * m.Lk + j];
    return { heatmap: k, head: m.head, batch: b, row: i, col: j, weight: v,
      weightText: Number.isNaN(v) ? 'null' : String(v), blocked: why,
      query: state.view.tokens ? state.view.tokens[i] : null,
      key: state.view.keyTokens ? state.view.keyTokens[j] : null, computed: !!m.computed };
  }

  function showCell(k, i, j, fromKeys, cx, cy) {
    const info = cellInfo(k, i, j);
    if (!info) return;
    const m = mats[k];
    state.hover = info;
    const q = info.query !== null ? ' \u201c' + info.query + '\u201d' : '';
    const key = info.key !== null ? ' \u201c' + info.key + '\u201d' : '';
    const lines = [
      m.title + (norm.B > 1 ? ', sequence ' + info.batch : ''),
      'query ' + i + q + ' \u2192 key ' + j + key,
      'weight ' + info.weightText + (m.computed ? ' (mean computed in the page)' : ''),
    ];
    if (info.blocked) lines.push('blocked (' + info.blocked + ')');
    const tip = $('tip');
    tip.textContent = lines.join('\n');
    Object.assign(tip.dataset, { heatmap: k, head: info.head, row: i, col: j, weight: info.weightText,
      blocked: info.blocked || '' });
    tip.hidden = false;
    const r = m.canvas.getBoundingClientRect();
    if (fromKeys || cx === undefined) {
      cx = r.left + (j + 1) * r.width / m.Lk;
      cy = r.top + (i + 1) * r.height / m.Lq;
    }
    const tw = tip.offsetWidth, th = tip.offsetHeight;
    tip.style.left = Math.min(cx + 14, window.innerWidth - tw - 4) + 'px';
    tip.style.top = (cy + 16 + th > window.innerHeight ? cy - th - 8 : cy + 16) + 'px';
    for (const o of mats) o.cursor.hidden = true;
    m.cursor.hidden = false;
    m.cursor.style.left = (100 * j / m.Lk) + '%';
    m.cursor.style.width = 'max(4px, ' + (100 / m.Lk) + '%)';
    m.cursor.style.right = 'auto';
    m.cursor.style.top = (100 * i / m.Lq) + '%';
    m.cursor.style.height = 'max(4px, ' + (100 / m.Lq) + '%)';
  }

  function hideTip() {
    $('tip').hidden = true;
    for (const o of mats) o.cursor.hidden = true;
  }

  function keyNav(k, e) {
    const m = mats[k];
    if (!cursor || cursor.k !== k) cursor = { k: k, i: 0, j: 0 };
    let { i, j } = cursor;
    const page = Math.max(1, Math.round(m.Lq / 10));
    switch (e.key) {
      case 'ArrowUp': i--; break;
      case 'ArrowDown': i++; break;
      case 'ArrowLeft': j--; break;
      case 'ArrowRight': j++; break;
      case 'PageUp': i -= page; break;
      case 'PageDown': i += page; break;
      case 'Home': j = 0; break;
      case 'End': j = m.Lk - 1; break;
      case 'Enter': case ' ':
        selectRow(state.selectedRow === i ? null : i);
        e.preventDefault();
        return;
      case 'Escape': selectRow(null); hideTip(); return;
      default: return;
    }
    e.preventDefault();
    cursor.i = Math.max(0, Math.min(m.Lq - 1, i));
    cursor.j = Math.max(0, Math.min(m.Lk - 1, j));
    showCell(k, cursor.i, cursor.j, true);
  }

  function renderTiming() {
    const t = state.timing || {};
    const parts = [];
    const ms = (x) => (typeof x === 'number' ? x.toFixed(3).replace(/\.?0+$/, '') + ' ms' : '?');
    if (t.queue_ms !== undefined) {
      parts.push('queue ' + ms(t.queue_ms), 'compute ' + ms(t.compute_ms), 'total at attnd ' + ms(t.total_ms));
    } else {
      parts.push('(KServe v2 answers carry no timing; attnd\u2019s access log has it)');
    }
    parts.push('round trip ' + (t.roundTripMs || 0).toFixed(1) + ' ms', 'JSON parse ' + (t.parseMs || 0).toFixed(1) + ' ms');
    if (state.lastDraw && state.status !== 'drawing') {
      parts.push('draw ' + state.lastDraw.drawMs.toFixed(1) + ' ms (' + state.lastDraw.heatmaps + ' heatmap' +
        (state.lastDraw.heatmaps > 1 ? 's' : '') + ')');
    }
    $('timing').textContent = parts.join(' \u00b7 ');
  }

  function renderOutput(b) {
    const box = $('output');
    $('h-output').hidden = !norm.out;
    if (!norm.out) { box.replaceChildren(); return; }
    let shape = norm.outShape.slice(), flat = norm.out;
    const batched = norm.B > 1 && shape[0] === norm.B;
    if (batched) {
      const n = prod(shape.slice(1));
      flat = flat.slice(b * n, (b + 1) * n);
      shape = shape.slice(1);
    }
    const cols = shape[shape.length - 1] || 1;
    const rows = Math.max(1, flat.length / cols);
    const lead = shape.slice(0, -1);
    const qLabels = state.view.tokens;
    const table = el('table', {});
    const hr = el('tr', {}, el('th', { text: 'output' + (batched ? '[' + b + ']' : '') }));
    for (let j = 0; j < Math.min(cols, OUT_COLS); j++) hr.append(el('th', { text: String(j) }));
    table.append(hr);
    for (let r = 0; r < Math.min(rows, OUT_ROWS); r++) {
      const idx = lead.length ? unflatIndex(r, lead) : [];
      const name = lead.length === 1 && qLabels && qLabels.length === rows ? qLabels[r] : '[' + idx.join(', ') + ']';
      const tr = el('tr', {}, el('th', { text: name }));
      for (let j = 0; j < Math.min(cols, OUT_COLS); j++) {
        const v = flat[r * cols + j];
        tr.append(el('td', { text: v === null ? 'null' : String(+v.toPrecision(4)), title: String(v) }));
      }
      table.append(tr);
    }
    const kids = [table];
    if (rows > OUT_ROWS || cols > OUT_COLS) {
      kids.push(el('p', { class: 'muted', text: 'Showing ' + Math.min(rows, OUT_ROWS) + ' of ' + rows + ' rows and ' +
        Math.min(cols, OUT_COLS) + ' of ' + cols + ' columns; Export JSON has all of them.' }));
    }
    box.replaceChildren(...kids);
  }

  /* ---- export --------------------------------------------------------- */

  function download(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = el('a', { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // The heatmaps as one picture: titles, token labels when the cells are
  // large enough to carry them, and the colour scale in words.
  function exportPng() {
    if (!mats.length) return;
    const pad = 16, titleH = 22, maxSide = 512;
    const cs = getComputedStyle(document.body); // the theme's colours, resolved
    const bg = cs.backgroundColor, fg = cs.color;
    const c = el('canvas', { width: 1, height: 1 });
    const ctx = c.getContext('2d');
    const font = '12px sans-serif';
    ctx.font = font;
    const { tokens, keyTokens } = state.view;
    const m0 = mats[0];
    const s = Math.min(1, maxSide / Math.max(m0.canvas.width, m0.canvas.height));
    const tw = Math.round(m0.canvas.width * s), th = Math.round(m0.canvas.height * s);
    const labelled = tw / m0.Lk >= LABEL_CELL && th / m0.Lq >= LABEL_CELL;
    const widest = (l) => (labelled && l ? Math.ceil(Math.max(...l.map((t) => ctx.measureText(t).width))) + 6 : 0);
    const left = widest(tokens || Array.from({ length: m0.Lq }, (_, i) => String(i)));
    const top = widest(keyTokens || Array.from({ length: m0.Lk }, (_, j) => String(j)));
    const perRow = Math.min(mats.length, 4);
    const boxW = left + tw, boxH = titleH + top + th;
    const rows = Math.ceil(mats.length / perRow);
    const W = pad + perRow * (boxW + pad), H = pad + rows * (boxH + pad) + 24;
    c.width = W;
    c.height = H;
    ctx.fillStyle = bg;
    ctx.fillRect(0, 0, W, H);
    ctx.fillStyle = fg;
    mats.forEach((m, k) => {
      const x = pad + (k % perRow) * (boxW + pad), y = pad + Math.floor(k / perRow) * (boxH + pad);
      ctx.font = '14px sans-serif';
      ctx.fillText(m.title + '  (' + m.Lq + ' \u00d7 ' + m.Lk + ')', x, y + 15);
      const gx = x + left, gy = y + titleH + top;
      ctx.imageSmoothingEnabled = tw < m.canvas.width;
      ctx.drawImage(m.canvas, gx, gy, tw, th);
      if (!labelled) return;
      ctx.font = font;
      ctx.textBaseline = 'middle';
      ctx.textAlign = 'right';
      for (let i = 0; i < m.Lq; i++) ctx.fillText(tokens ? tokens[i] : String(i), gx - 4, gy + (i + 0.5) * th / m.Lq);
      for (let j = 0; j < m.Lk; j++) {
        ctx.save();
        ctx.translate(gx + (j + 0.5) * tw / m.Lk, gy - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = 'left';
        ctx.fillText(keyTokens ? keyTokens[j] : String(j), 0, 0);
        ctx.restore();
      }
      ctx.textBaseline = 'alphabetic';
      ctx.textAlign = 'left';
    });
    ctx.font = font;
    ctx.fillText('attnd, ' + (state.preset || '') + ': rows are query tokens, columns key tokens; viridis from 0 to ' +
      (state.view.scale === 'global' ? String(+state.view.vmax.toPrecision(4)) : 'each row\u2019s largest weight') +
      '; grey hatching = blocked', pad, H - 10);
    c.toBlob((blob) => {
      state.exports.png = { bytes: blob.size, width: W, height: H };
      download(blob, 'attention.png');
    }, 'image/png');
  }

  function exportJson() {
    if (!state.responseText) return;
    const blob = new Blob([state.responseText], { type: 'application/json' });
    state.exports.json = { bytes: blob.size };
    download(blob, 'attention.json');
  }

  function shq(s) { return "'" + s.replace(/'/g, "'\\''") + "'"; }

  async function copyCurl() {
    if (!state.requestText) return;
    const key = $('api-key').value.trim();
    let cmd = 'curl -s ' + shq(location.origin + state.requestEndpoint) + " -H 'Content-Type: application/json'";
    if (key) cmd += ' -H ' + shq('Authorization: Bearer ' + key);
    cmd += ' --data-binary ' + shq(state.requestText);
    state.curl = cmd;
    const out = $('curl-out');
    out.value = cmd;
    $('curl-box').hidden = false;
    let how = '';
    try {
      await navigator.clipboard.writeText(cmd);
      how = '(copied to the clipboard)';
    } catch (e) {
      out.focus();
      out.select();
      try { how = document.execCommand('copy') ? '(copied to the clipboard)' : '(select it and copy)'; } catch (e2) {
        how = '(select it and copy)';
      }
    }
    $('curl-copied').textContent = how;
    state.curlCopied = how === '(copied to the clipboard)';
  }

  /* ---- start ---------------------------------------------------------- */

  async function getJson(path) {
    const r = await fetch(path, { headers: Object.assign({ Accept: 'application/json' }, authHeaders()) });
    const t = await r.text();
    let j = null;
    try { j = JSON.parse(t); } catch (e) { j = null; }
    if (!r.ok) {
      const e = new Error(j && j.error ? j.error : 'HTTP ' + r.status + ' for ' + path);
      e.status = r.status;
      throw e;
    }
    return j;
  }

  async function loadServer() {
    try {
      const meta = await getJson('/v2');
      state.server = { name: meta.name, version: meta.version };
      $('server-info').textContent = meta.name + ' ' + meta.version + ' at ' + location.host;
    } catch (e) {
      $('server-info').textContent = 'attnd at ' + location.host;
    }
    try {
      const list = await getJson('/v1/models');
      state.models = list.models || [];
      $('err-key').hidden = true;
    } catch (e) {
      state.models = [];
      if (e.status === 401 || e.status === 403) showError(e.status, e.message, 'key');
    }
    fillPresets();
  }

  function wire() {
    const theme = $('theme');
    let saved = null;
    try { saved = localStorage.getItem('attnd.theme'); } catch (e) { saved = null; }
    if (saved === 'light' || saved === 'dark') theme.value = saved;
    document.documentElement.dataset.theme = theme.value;
    theme.addEventListener('change', () => {
      document.documentElement.dataset.theme = theme.value;
      try { localStorage.setItem('attnd.theme', theme.value); } catch (e) { /* private mode */ }
    });

    const key = $('api-key');
    $('key-form').addEventListener('submit', (e) => { // Enter in the key field
      e.preventDefault();
      key.dispatchEvent(new Event('change'));
    });
    try { key.value = sessionStorage.getItem('attnd.key') || ''; } catch (e) { key.value = ''; }
    key.addEventListener('change', () => {
      try { sessionStorage.setItem('attnd.key', key.value); } catch (e) { /* private mode */ }
      $('err-key').hidden = true;
      key.removeAttribute('aria-invalid');
      if (!state.models.length) loadServer();
    });

    $('preset').addEventListener('change', () => loadPreset($('preset').value));
    $('endpoint').addEventListener('change', () => {
      setEndpoint($('endpoint').value);
      syncControls();
      renderGrids();
    });
    $('ctl-heads').addEventListener('change', () => {
      const v = Number($('ctl-heads').value);
      editBody(() => {
        if (Number.isInteger(v) && v >= 1) body.num_heads = v; else delete body.num_heads;
      });
    });
    $('ctl-causal').addEventListener('change', () => {
      editBody(() => {
        const p = params();
        if ($('ctl-causal').checked) p.causal = true; else delete p.causal;
      });
    });
    const setWindow = () => {
      const l = $('ctl-window-left').value.trim(), r = $('ctl-window-right').value.trim();
      const num = (t) => (Number.isFinite(Number(t)) ? Number(t) : t);
      editBody(() => {
        const p = params();
        delete p.window;
        delete p.window_left;
        delete p.window_right;
        if (l === '') return;
        const w = [num(l), r === '' ? 0 : num(r)];
        if (isV2()) { p.window_left = w[0]; p.window_right = w[1]; } else p.window = w;
      });
    };
    $('ctl-window-left').addEventListener('change', setWindow);
    $('ctl-window-right').addEventListener('change', setWindow);
    $('ctl-softcap').addEventListener('change', () => {
      const t = $('ctl-softcap').value.trim();
      editBody(() => {
        const p = params();
        if (t === '') delete p.softcap; else p.softcap = Number.isFinite(Number(t)) ? Number(t) : t;
      });
    });
    $('ctl-alibi').addEventListener('change', () => {
      editBody(() => {
        const p = params();
        if ($('ctl-alibi').checked) p.alibi = true; else delete p.alibi;
      });
    });
    $('ctl-scale').addEventListener('change', () => {
      const t = $('ctl-scale').value.trim();
      editBody(() => {
        const p = params();
        if (t === '') delete p.scale; else p.scale = Number.isFinite(Number(t)) ? Number(t) : t;
      });
    });
    for (const r of document.querySelectorAll('input[name="mode"]')) {
      r.addEventListener('change', () => {
        const json = $('mode-json').checked;
        if (!json && !readJson()) { $('mode-json').checked = true; return; }
        $('json-pane').hidden = !json;
        $('grid-pane').hidden = json;
        if (!json) { syncControls(); renderGrids(); }
      });
    }
    let timer = 0;
    $('json').addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(() => { if (readJson()) syncControls(); }, 300);
    });
    $('editor').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
    });
    $('run').addEventListener('click', () => run());
    $('colour-scale').addEventListener('change', () => { if (norm) render(); });
    $('batch').addEventListener('change', () => { if (norm) { selectRow(null); render(); } });
    $('export-png').addEventListener('click', exportPng);
    $('export-json').addEventListener('click', exportJson);
    $('copy-curl').addEventListener('click', copyCurl);
    document.addEventListener('keydown', (e) => { if (e.key === 'Escape') hideTip(); });
  }

  async function start() {
    wire();
    await loadServer();
    const want = decodeURIComponent(location.hash.replace(/^#/, ''));
    loadPreset(fillPresets.list.some((p) => p.id === want) ? want : 'cat');
    setStatus('ready');
    await run();
  }

  start();
})();
