#!/usr/bin/env node
// The browser test of attnd's page (GET /, the files of web/): Debian's
// chromium driven by playwright-core, against a running attnd.
//
//   node tests/web/run.mjs --base http://127.0.0.1:PORT
//        [--keyed-base http://127.0.0.1:PORT2 --keyed-key KEY] [--deps DIR]
//        [--out DIR] [--chromium PATH] [--readme-shot PATH] [-k SUBSTRING]
//
// scripts/test-web.sh installs what this needs, starts attnd on an
// ephemeral port of 127.0.0.1 (and a second one with ATTND_API_KEY=KEY,
// --keyed-base), runs this and stops them.  --deps is where
// `npm ci` put playwright-core (default build/web-test); screenshots go to
// --out (default build/web-test).  The page is read through its test hooks
// (window.attnd, data-* attributes), never through pixels, except where
// the pixels are the point (hatching).  Every number the page shows is
// checked against the API's own answer to the same request, fetched here.
//
// Prints "ok NAME" or "FAIL NAME: reason" per test, the draw times, and
// "N passed, M failed" alone on the last line; exits 1 when any failed.
// Bounded: each test has a timeout, and the whole run a watchdog.

import { createRequire } from 'node:module';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const TOTAL_TIMEOUT_MS = 8 * 60 * 1000;
const TEST_TIMEOUT_MS = 120 * 1000;
const HATCH_LIGHT = [0xd9, 0xd9, 0xd9];
const HATCH_DARK = [0x8c, 0x8c, 0x8c];

function parseArgs(argv) {
  const a = { deps: 'build/web-test', out: 'build/web-test', chromium: '/usr/bin/chromium', k: [] };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i];
    const next = () => { if (i + 1 >= argv.length) throw new Error(v + ' needs a value'); return argv[++i]; };
    if (v === '--base') a.base = next().replace(/\/$/, '');
    else if (v === '--keyed-base') a.keyedBase = next().replace(/\/$/, '');
    else if (v === '--keyed-key') a.keyedKey = next();
    else if (v === '--deps') a.deps = next();
    else if (v === '--out') a.out = next();
    else if (v === '--chromium') a.chromium = next();
    else if (v === '--readme-shot') a.readmeShot = next();
    else if (v === '-k') a.k.push(next());
    else throw new Error('unknown argument ' + v);
  }
  if (!a.base) throw new Error('--base http://127.0.0.1:PORT is required');
  return a;
}

const args = parseArgs(process.argv.slice(2));
const require = createRequire(path.resolve(args.deps, 'package.json'));
const { chromium } = require('playwright-core');
fs.mkdirSync(args.out, { recursive: true });

const watchdog = setTimeout(() => {
  console.log('FAIL watchdog: the run took longer than ' + TOTAL_TIMEOUT_MS / 1000 + ' s');
  console.log(passed + ' passed, ' + (failed + 1) + ' failed');
  process.exit(1);
}, TOTAL_TIMEOUT_MS);
watchdog.unref();

/* ---- tiny runner ------------------------------------------------------ */

let passed = 0, failed = 0;
const tests = [];
const test = (name, fn, timeoutMs) => tests.push({ name, fn, timeoutMs: timeoutMs || TEST_TIMEOUT_MS });
const notes = [];

class Failure extends Error {}
function check(cond, msg) { if (!cond) throw new Failure(msg); }
function eq(got, want, what) {
  check(got === want, what + ': got ' + JSON.stringify(got) + ', want ' + JSON.stringify(want));
}

function withTimeout(p, ms, name) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Failure('timed out after ' + ms / 1000 + ' s')), ms); })])
    .finally(() => clearTimeout(t));
}

/* ---- the API, directly ------------------------------------------------ */

async function api(method, p, body, headers) {
  const r = await fetch(args.base + p, {
    method, body, headers: Object.assign(body ? { 'Content-Type': 'application/json' } : {}, headers || {}),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = null; }
  return { status: r.status, headers: r.headers, text, json };
}

// The answer's weights as {H, Lq, Lk, B, at(b, h, i, j)}, read the
// documented way (docs/api.md): v1 attn_weights nested, v2 flat.
function weightsOf(endpoint, req, ans) {
  const v2 = endpoint.startsWith('/v2/');
  const p = v2 ? req.parameters || {} : req;
  let shape, flat;
  if (v2) {
    const o = ans.outputs.find((x) => x.name === 'attn_weights');
    shape = o.shape;
    flat = o.data.flat(Infinity);
  } else {
    shape = ans.shape.attn_weights;
    flat = ans.attn_weights.flat(Infinity);
  }
  const r = shape.length, avg = p.average_attn_weights === true;
  const Lq = shape[r - 2], Lk = shape[r - 1];
  const H = avg || r < 3 ? 1 : shape[r - 3];
  const B = shape.slice(0, Math.max(0, r - (avg ? 2 : 3))).reduce((a, x) => a * x, 1);
  return { H, Lq, Lk, B, at: (b, h, i, j) => flat[((b * H + h) * Lq + i) * Lk + j] };
}

/* ---- the browser ------------------------------------------------------ */

let ctx, userDir;

async function launch() {
  userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnd-web-test-'));
  ctx = await chromium.launchPersistentContext(userDir, {
    executablePath: args.chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
    viewport: { width: 1280, height: 900 },
    deviceScaleFactor: 1,
    acceptDownloads: true,
    colorScheme: 'light',
  });
  try { await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: args.base }); } catch (e) { /* older chromium */ }
}

async function close() {
  if (ctx) await ctx.close().catch(() => {});
  if (userDir) fs.rmSync(userDir, { recursive: true, force: true });
}

// A fresh tab on the page; `problems` collects console errors, page
// errors, failed requests and Content-Security-Policy violations.
async function open(opts) {
  opts = opts || {};
  const page = await ctx.newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('requestfailed', (r) => {
    if (!/aborted/i.test(r.failure() ? r.failure().errorText : '')) problems.push('request failed: ' + r.url());
  });
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  });
  if (opts.scheme) await page.emulateMedia({ colorScheme: opts.scheme });
  await page.goto((opts.base || args.base) + '/' + (opts.hash ? '#' + opts.hash : ''));
  await settled(page, 0);
  const csp = await page.evaluate(() => window.__csp);
  for (const v of csp) problems.push('CSP violation: ' + v);
  return { page, problems };
}

// Wait until the page has finished more runs than `before`.
async function settled(page, before, timeoutMs) {
  await page.waitForFunction((n) => window.attnd && window.attnd.settled > n, before, { timeout: timeoutMs || 60000 });
  return page.evaluate(() => window.attnd.status);
}

async function runPreset(page, id, timeoutMs) {
  await page.selectOption('#preset', id);
  const before = await page.evaluate(() => window.attnd.settled);
  await page.click('#run');
  const status = await settled(page, before, timeoutMs);
  if (status !== 'done') {
    const err = await page.evaluate(() => window.attnd.error);
    throw new Failure('preset ' + id + ' ended ' + status + ': ' + JSON.stringify(err));
  }
  return page.evaluate(() => ({ endpoint: window.attnd.requestEndpoint, text: window.attnd.requestText,
    heatmaps: window.attnd.heatmaps, view: window.attnd.view, lastDraw: window.attnd.lastDraw }));
}

// What the API answers to the request the page sent last.
async function apiTwin(sent) {
  const r = await api('POST', sent.endpoint, sent.text);
  eq(r.status, 200, 'the API\'s status for the page\'s request');
  return weightsOf(sent.endpoint, JSON.parse(sent.text), r.json);
}

// Hover cell (i, j) of heatmap k; returns the tooltip's data.  On a
// heatmap with more cells than CSS pixels the pointer lands on a cell
// within `slack` of (i, j): the caller reads which from the tooltip.
async function hover(page, k, i, j, slack) {
  slack = slack || 0;
  const canvas = page.locator('figure.hm[data-heatmap="' + k + '"] canvas');
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const dims = await page.evaluate((n) => window.attnd.heatmaps[n], k);
  // 1 px of border on each side; the pointer at the cell's centre
  const x = box.x + 1 + (j + 0.5) * (box.width - 2) / dims.cols;
  const y = box.y + 1 + (i + 0.5) * (box.height - 2) / dims.rows;
  await page.mouse.move(x, y);
  await page.waitForFunction(([a, b, s, n]) => {
    const t = document.getElementById('tip');
    return !t.hidden && t.dataset.heatmap === String(n) && Math.abs(Number(t.dataset.row) - a) <= s &&
      Math.abs(Number(t.dataset.col) - b) <= s;
  }, [i, j, slack, k], { timeout: 5000 });
  return page.evaluate(() => Object.assign({ text: document.getElementById('tip').textContent },
    document.getElementById('tip').dataset));
}

async function shot(page, name, opts) {
  const file = path.join(args.out, name + '.png');
  await page.screenshot(Object.assign({ path: file, fullPage: true }, opts || {}));
  notes.push('screenshot ' + file);
  return file;
}

function luminance(css) {
  const m = /rgba?\((\d+), (\d+), (\d+)/.exec(css);
  const [r, g, b] = [m[1], m[2], m[3]].map((v) => {
    const c = Number(v) / 255;
    return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/* ---- the tests -------------------------------------------------------- */

test('http: GET / negotiates, the page has no inline script or style', async () => {
  const html = await api('GET', '/', null, { Accept: 'text/html,application/xhtml+xml;q=0.9,*/*;q=0.8' });
  eq(html.status, 200, 'GET / for a browser');
  check(/^text\/html/.test(html.headers.get('content-type')), 'content-type ' + html.headers.get('content-type'));
  const csp = html.headers.get('content-security-policy') || '';
  check(/script-src 'self'/.test(csp) && !/unsafe-inline|unsafe-eval/.test(csp), 'CSP: ' + csp);
  check(/^"[0-9a-f]{32}"$/.test(html.headers.get('etag') || ''), 'ETag: ' + html.headers.get('etag'));
  eq(html.headers.get('cache-control'), 'no-cache', 'Cache-Control');
  const again = await api('GET', '/', null, { Accept: 'text/html', 'If-None-Match': html.headers.get('etag') });
  eq(again.status, 304, 'GET / with If-None-Match');
  const json = await api('GET', '/', null, { Accept: '*/*' });
  eq(json.status, 200, 'GET / for curl');
  check(json.json && Array.isArray(json.json.endpoints), 'GET / with Accept */* is the JSON index');
  check(!/<script(?![^>]*\bsrc=)[^>]*>/i.test(html.text), 'an inline <script> in the page');
  check(!/<style|\sstyle=|\son[a-z]+=/i.test(html.text), 'inline style or event handler in the page');
  for (const f of ['app.js', 'style.css', 'favicon.svg']) {
    const r = await api('GET', '/ui/' + f);
    eq(r.status, 200, 'GET /ui/' + f);
  }
});

test('page loads with no console error, CSP violation or failed request', async () => {
  const { page, problems } = await open();
  const s = await page.evaluate(() => ({ status: window.attnd.status, presets: window.attnd.presets.map((p) => p.id),
    server: window.attnd.server }));
  eq(s.status, 'done', 'status after the first run');
  check(s.server && s.server.name === 'attnd', 'server info: ' + JSON.stringify(s.server));
  check(s.presets.includes('model-demo'), 'the resident model demo is a preset: ' + s.presets.join(', '));
  check(problems.length === 0, problems.join('; '));
  await shot(page, 'page-loaded');
  await page.close();
});

test('every preset runs; heatmaps and their sizes match the API', async () => {
  const { page, problems } = await open();
  const ids = await page.evaluate(() => window.attnd.presets.map((p) => p.id));
  check(ids.length >= 7, 'presets: ' + ids.join(', '));
  for (const id of ids) {
    const sent = await runPreset(page, id, 180000);
    const w = await apiTwin(sent);
    const want = w.H + (w.H > 1 ? 1 : 0);
    eq(sent.heatmaps.length, want, id + ': heatmaps');
    const figs = await page.$$eval('figure.hm', (fs) => fs.map((f) => [f.dataset.rows, f.dataset.cols]));
    eq(figs.length, want, id + ': figures');
    for (const [r, c] of figs) {
      eq(Number(r), w.Lq, id + ': rows');
      eq(Number(c), w.Lk, id + ': columns');
    }
    const maxPx = 1024;
    for (const h of sent.heatmaps) {
      check(h.canvasWidth <= Math.max(maxPx, w.Lk * 36) && h.canvasWidth >= Math.min(w.Lk, maxPx),
        id + ': canvas width ' + h.canvasWidth);
      eq(h.downsampled, w.Lq > maxPx || w.Lk > maxPx, id + ': downsampled');
    }
    const note = await page.isVisible('#downsample-note');
    eq(note, w.Lq > maxPx || w.Lk > maxPx, id + ': the downsampling note shown');
    if (w.Lq >= 1024) {
      const d = sent.lastDraw;
      notes.push('draw ' + id + ': ' + d.heatmaps + ' heatmaps of ' + d.rows + ' x ' + d.cols + ' weights on ' +
        d.canvasWidth + ' x ' + d.canvasHeight + ' px: ' + d.drawMs.toFixed(1) + ' ms drawing (per heatmap ' +
        d.perHeatmapMs.map((x) => x.toFixed(1)).join(', ') + ' ms; longest ' + d.maxStepMs.toFixed(1) +
        ' ms), ' + d.totalMs.toFixed(1) + ' ms until the last was on its canvas');
    }
    await shot(page, 'preset-' + id);
  }
  check(problems.length === 0, problems.join('; '));
  await page.close();
}, 300000);

test('the sliding window: its controls, cells outside the band hatched, its errors at the control', async () => {
  const { page, problems } = await open();
  const sent = await runPreset(page, 'window');
  eq(await page.inputValue('#ctl-window-left'), '3', 'window left shown');
  eq(await page.inputValue('#ctl-window-right'), '0', 'window right shown');
  // 12 queries, causal with 3 keys back: row i sees min(i, 3) + 1 keys
  const seen = (L, left) => Array.from({ length: L }, (_, i) => Math.min(i, left) + 1).reduce((a, x) => a + x, 0);
  for (const h of sent.heatmaps) eq(h.blocked, 144 - seen(12, 3), 'blocked cells of ' + h.title);
  const w = await apiTwin(sent);
  for (let i = 0; i < 12; i++) {
    for (let j = 0; j < 12; j++) {
      const open = j <= i && j >= i - 3;
      if (!open) eq(w.at(0, 0, i, j), 0, 'the API\'s weight (' + i + ', ' + j + ') outside the band');
    }
  }
  let t = await hover(page, 0, 6, 1);
  eq(t.blocked, 'window', 'the tooltip of a cell left of the window');
  eq(t.weight, '0', 'its weight');
  t = await hover(page, 0, 6, 8);
  eq(t.blocked, 'causal', 'the tooltip of a cell right of the diagonal');
  t = await hover(page, 0, 6, 4);
  eq(t.blocked, '', 'a cell in the band');
  await shot(page, 'window-hatched');
  // the control sets the request: a window of 1
  await page.fill('#ctl-window-left', '1');
  await page.press('#ctl-window-left', 'Tab');
  const json = JSON.parse(await page.inputValue('#json'));
  eq(JSON.stringify(json.window), '[1,0]', 'the request\'s window after the control');
  let before = await page.evaluate(() => window.attnd.settled);
  await page.click('#run');
  eq(await settled(page, before), 'done', 'the run with a window of 1');
  const hms = await page.evaluate(() => window.attnd.heatmaps);
  for (const h of hms) eq(h.blocked, 144 - seen(12, 1), 'blocked cells with a window of 1');
  check(problems.length === 0, problems.join('; '));
  // a right bound with causal is the server's 400, shown at the window control
  await page.fill('#ctl-window-right', '2');
  await page.press('#ctl-window-right', 'Tab');
  before = await page.evaluate(() => window.attnd.settled);
  await page.click('#run');
  eq(await settled(page, before), 'error', 'window right 2 with causal');
  const err = await page.evaluate(() => window.attnd.error);
  eq(err.status + ' ' + err.field, '400 window', 'the error and where it is shown');
  check(await page.isVisible('#err-window'), 'the window control\'s error is visible');
  eq(await page.getAttribute('#ctl-window-left', 'aria-invalid'), 'true', 'the window control marked');
  await page.close();
});

test('hovering a cell shows the API\'s exact weight', async () => {
  const { page } = await open();
  for (const [id, cells] of [
    ['cat', [[0, 0], [1, 5], [5, 2], [3, 3]]],
    ['cross', [[0, 0], [6, 5], [2, 2]]],
    ['gqa', [[4, 1], [0, 3]]],
    ['model-demo', [[5, 0], [2, 4]]],
  ]) {
    const sent = await runPreset(page, id);
    const w = await apiTwin(sent);
    for (let k = 0; k < w.H; k++) {
      for (const [i, j] of cells) {
        const t = await hover(page, k, i, j);
        const want = w.at(0, k, i, j);
        eq(t.weight, String(want), id + ' head ' + k + ' cell (' + i + ', ' + j + ') weight text');
        eq(Number(t.weight), want, id + ' head ' + k + ' cell (' + i + ', ' + j + ') weight');
        check(t.text.includes('weight ' + String(want)), 'the tooltip reads ' + JSON.stringify(t.text));
      }
    }
    if (id === 'cat') {
      const t = await hover(page, 0, 1, 5);
      check(t.text.includes('\u201ccat\u201d') && t.text.includes('\u201cmat\u201d'), 'token pair in ' + JSON.stringify(t.text));
    }
    if (w.H > 1) { // the mean heatmap: the mean of the API's heads
      const t = await hover(page, w.H, 1, 1);
      let s = 0;
      for (let h = 0; h < w.H; h++) s += w.at(0, h, 1, 1);
      check(Math.abs(Number(t.weight) - s / w.H) < 1e-12, id + ' mean: ' + t.weight + ' vs ' + s / w.H);
    }
  }
  await page.close();
});

test('clicking a query token highlights its row in every head', async () => {
  const { page } = await open({ hash: 'causal' });
  await runPreset(page, 'causal');
  await page.click('#tokens button[data-row="2"]');
  const rows = await page.$$eval('figure.hm', (fs) => fs.map((f) => [f.dataset.selectedRow,
    !f.querySelector('.hm-row-sel').hidden]));
  eq(rows.length, 3, 'heatmaps');
  for (const [r, shown] of rows) { eq(r, '2', 'selected row'); eq(shown, true, 'row outline shown'); }
  eq(await page.getAttribute('#tokens button[data-row="2"]', 'aria-pressed'), 'true', 'aria-pressed');
  eq(await page.evaluate(() => window.attnd.selectedRow), 2, 'attnd.selectedRow');
  await shot(page, 'row-selected');
  await page.click('#tokens button[data-row="2"]');
  eq(await page.evaluate(() => window.attnd.selectedRow), null, 'a second click clears it');
  await page.close();
});

test('causal and padding cells are hatched, not drawn as 0', async () => {
  const { page } = await open();
  await runPreset(page, 'causal');
  const hms = await page.evaluate(() => window.attnd.heatmaps);
  for (const h of hms) eq(h.blocked, 15, 'blocked cells of ' + h.title);
  // the pixels of a blocked cell are the two hatch greys; an attended
  // cell is one viridis colour
  const px = await page.evaluate(() => {
    const c = document.querySelector('figure.hm[data-heatmap="0"] canvas');
    const ctx = c.getContext('2d');
    const cell = c.width / 6;
    const colours = (i, j) => {
      const d = ctx.getImageData(Math.floor(j * cell) + 1, Math.floor(i * cell) + 1, Math.floor(cell) - 2,
        Math.floor(cell) - 2).data;
      const set = new Set();
      for (let k = 0; k < d.length; k += 4) set.add(d[k] + ',' + d[k + 1] + ',' + d[k + 2]);
      return [...set];
    };
    return { blocked: colours(0, 5), open: colours(5, 0), diag: colours(2, 2) };
  });
  const hatch = [HATCH_LIGHT.join(','), HATCH_DARK.join(',')];
  eq(px.blocked.length, 2, 'colours in a blocked cell (' + px.blocked.join(' ') + ')');
  check(px.blocked.every((c) => hatch.includes(c)), 'blocked cell colours ' + px.blocked.join(' '));
  eq(px.open.length, 1, 'colours in an attended cell (' + px.open.join(' ') + ')');
  check(!hatch.includes(px.open[0]) && !hatch.includes(px.diag[0]), 'an attended cell is not grey');
  const t = await hover(page, 0, 0, 5);
  eq(t.blocked, 'causal', 'the tooltip says why');
  eq(t.weight, '0', 'a blocked cell\'s weight');
  await shot(page, 'causal-hatched');
  // padding: sequence 1 has two padding keys, blocked in every row
  await runPreset(page, 'padding');
  await page.selectOption('#batch', '1');
  await page.waitForFunction(() => window.attnd.view.batch === 1 && window.attnd.status === 'done');
  const pad = await page.evaluate(() => window.attnd.heatmaps.map((h) => h.blocked));
  check(pad.every((n) => n === 2 * 5), 'padding: blocked cells per heatmap ' + pad.join(', '));
  const tp = await hover(page, 1, 0, 4);
  eq(tp.blocked, 'key_padding_mask', 'padding cell reason');
  await shot(page, 'padding-hatched');
  await page.close();
});

test('server errors appear inline, in the server\'s words, by the field', async () => {
  const { page } = await open();
  // heads = 3 with 4 columns: attnd names 'query'
  await page.fill('#ctl-heads', '3');
  await page.dispatchEvent('#ctl-heads', 'change');
  let before = await page.evaluate(() => window.attnd.settled);
  await page.click('#run');
  eq(await settled(page, before), 'error', 'status');
  let sent = await page.evaluate(() => ({ text: document.getElementById('json').value, error: window.attnd.error }));
  let r = await api('POST', '/v1/attention', sent.text);
  eq(r.status, 400, 'the API\'s status');
  const qErr = page.locator('#grid-pane p.err[data-error-for="query"]');
  check(await qErr.isVisible(), 'no message next to the query grid');
  eq(await qErr.textContent(), r.json.error, 'the message next to query');
  eq(sent.error.field, 'query', 'attnd.error.field');
  await shot(page, 'error-query');
  // an unknown field, in the JSON editor: the message goes under it
  await page.check('#mode-json');
  await page.fill('#json', '{"query": [[1, 0], [0, 1]], "causl": true}');
  before = await page.evaluate(() => window.attnd.settled);
  await page.click('#run');
  eq(await settled(page, before), 'error', 'status');
  r = await api('POST', '/v1/attention', '{"query": [[1, 0], [0, 1]], "causl": true}');
  eq(await page.textContent('#err-json'), r.json.error, 'the message under the JSON');
  check(/did you mean 'causal'/.test(r.json.error), 'attnd suggests causal: ' + r.json.error);
  // num_heads out of range: next to the Heads control
  await page.fill('#json', '{"query": [[1, 0], [0, 1]], "num_heads": 0}');
  before = await page.evaluate(() => window.attnd.settled);
  await page.keyboard.press('Control+Enter');
  eq(await settled(page, before), 'error', 'status after Ctrl+Enter');
  r = await api('POST', '/v1/attention', '{"query": [[1, 0], [0, 1]], "num_heads": 0}');
  eq(await page.textContent('#err-heads'), r.json.error, 'the message by Heads');
  eq(await page.getAttribute('#ctl-heads', 'aria-invalid'), 'true', 'Heads marked invalid');
  await shot(page, 'error-heads');
  // invalid JSON is the page's own complaint and is not sent
  await page.fill('#json', '{"query": [[1, 0]');
  await page.click('#run');
  check((await page.textContent('#err-json')).startsWith('JSON: '), 'invalid JSON reported');
  await page.close();
});

test('1024 x 1024 per head, 4 heads: drawn on canvases, draw time measured', async () => {
  const { page } = await open();
  const sent = await runPreset(page, 'large', 180000);
  const d = sent.lastDraw;
  eq(d.heatmaps, 5, 'heatmaps (4 heads and the mean)');
  eq(d.canvasWidth, 1024, 'canvas width');
  eq(d.canvasHeight, 1024, 'canvas height');
  eq(d.downsampled, false, 'downsampled');
  const w = await apiTwin(sent);
  for (const [k, i, j] of [[0, 1020, 3], [3, 600, 597], [2, 10, 5], [1, 500, 500]]) {
    const t = await hover(page, k, i, j, 3);
    const [r, c] = [Number(t.row), Number(t.col)];
    eq(t.weight, String(w.at(0, k, r, c)), 'head ' + k + ' cell (' + r + ', ' + c + ')');
    eq(t.blocked, c > r ? 'causal' : '', 'head ' + k + ' cell (' + r + ', ' + c + ') blocked');
  }
  // responsive after drawing: an input event is handled at once
  const lag = await page.evaluate(() => new Promise((res) => {
    const t0 = performance.now();
    setTimeout(() => res(performance.now() - t0), 0);
  }));
  check(lag < 100, 'the page answers a timer ' + lag.toFixed(1) + ' ms late');
  const timing = await page.evaluate(() => window.attnd.timing);
  notes.push('large 1024: JSON answer of ' + (await page.evaluate(() => window.attnd.responseText.length)) +
    ' bytes, round trip ' + timing.roundTripMs.toFixed(1) + ' ms, JSON.parse ' + timing.parseMs.toFixed(1) +
    ' ms, draw ' + d.drawMs.toFixed(1) + ' ms for 5 heatmaps (' + d.perHeatmapMs.map((x) => x.toFixed(1)).join(', ') +
    '), longest step ' + d.maxStepMs.toFixed(1) + ' ms');
  await shot(page, 'large-1024');
  // per-row colours: drawn again, as fast
  await page.selectOption('#colour-scale', 'global');
  await page.waitForFunction(() => window.attnd.status === 'done' && window.attnd.view.scale === 'global');
  const g = await page.evaluate(() => window.attnd.lastDraw);
  notes.push('large 1024, global colour scale: draw ' + g.drawMs.toFixed(1) + ' ms (' +
    g.perHeatmapMs.map((x) => x.toFixed(1)).join(', ') + ')');
  await page.close();
}, 200000);

test('2048 x 2048 is downsampled to 1024 pixels, with a note', async () => {
  const { page } = await open();
  const sent = await runPreset(page, 'larger', 180000);
  const d = sent.lastDraw;
  eq(d.downsampled, true, 'downsampled');
  eq(d.canvasWidth, 1024, 'canvas width');
  check(await page.isVisible('#downsample-note'), 'the note is shown');
  const note = await page.textContent('#downsample-note');
  check(/2048 \u00d7 2048/.test(note) && /2 \u00d7 2/.test(note), 'note: ' + note);
  const w = await apiTwin(sent);
  const t = await hover(page, 0, 2040, 3, 6);
  check(Math.abs(Number(t.row) - 2040) <= 6, 'the row under the pointer: ' + t.row);
  eq(t.weight, String(w.at(0, 0, Number(t.row), Number(t.col))), 'weight of the cell under the pointer');
  notes.push('larger 2048 (downsampled to 1024 x 1024 px): draw ' + d.drawMs.toFixed(1) + ' ms');
  await shot(page, 'larger-2048');
  await page.close();
}, 200000);

test('export PNG and JSON; copy as curl gives the same answer', async () => {
  const { page } = await open();
  const sent = await runPreset(page, 'cross');
  let [dl] = await Promise.all([page.waitForEvent('download'), page.click('#export-png')]);
  eq(dl.suggestedFilename(), 'attention.png', 'PNG name');
  const png = fs.readFileSync(await dl.path());
  check(png.subarray(1, 4).toString() === 'PNG', 'not a PNG');
  const exp = await page.evaluate(() => window.attnd.exports.png);
  eq(png.readUInt32BE(16), exp.width, 'PNG width');
  eq(png.readUInt32BE(20), exp.height, 'PNG height');
  fs.copyFileSync(await dl.path(), path.join(args.out, 'export.png'));
  notes.push('export ' + path.join(args.out, 'export.png') + ' (' + png.length + ' bytes, ' + exp.width + ' x ' + exp.height + ')');
  [dl] = await Promise.all([page.waitForEvent('download'), page.click('#export-json')]);
  eq(dl.suggestedFilename(), 'attention.json', 'JSON name');
  const exported = JSON.parse(fs.readFileSync(await dl.path(), 'utf8'));
  const w = await apiTwin(sent);
  eq(JSON.stringify(exported.attn_weights.flat(Infinity)),
    JSON.stringify(Array.from({ length: w.H * w.Lq * w.Lk }, (_, k) => w.at(0, 0, 0, k))), 'exported weights');
  await page.click('#copy-curl');
  await page.waitForFunction(() => window.attnd.curl);
  const cmd = await page.evaluate(() => window.attnd.curl);
  eq(await page.inputValue('#curl-out'), cmd, 'the command shown');
  const clip = await page.evaluate(() => navigator.clipboard.readText().catch(() => null));
  if (clip !== null) eq(clip, cmd, 'the clipboard');
  const out = await new Promise((res, rej) => execFile('sh', ['-c', cmd], { timeout: 30000, maxBuffer: 1 << 26 },
    (e, so) => (e ? rej(e) : res(so))));
  const viaCurl = JSON.parse(out);
  eq(JSON.stringify(viaCurl.attn_weights), JSON.stringify(exported.attn_weights), 'the curl answer\'s weights');
  eq(JSON.stringify(viaCurl.output), JSON.stringify(exported.output), 'the curl answer\'s output');
  await page.close();
});

test('the API key field sends Authorization: Bearer KEY', async () => {
  const { page } = await open();
  await page.fill('#api-key', 'k-123 test');
  await page.press('#api-key', 'Enter');
  const [req] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith('/v1/attention')),
    page.click('#run'),
  ]);
  eq(req.headers().authorization, 'Bearer k-123 test', 'Authorization');
  await page.waitForFunction(() => window.attnd.status === 'done');
  await page.click('#copy-curl');
  await page.waitForFunction(() => window.attnd.curl);
  check((await page.evaluate(() => window.attnd.curl)).includes("-H 'Authorization: Bearer k-123 test'"), 'curl has the key');
  // the page's files need no key
  const r = await api('GET', '/ui/app.js');
  eq(r.status, 200, '/ui/app.js without a key');
  await page.close();
});

test('with API keys on: the page needs no key, a run without one shows the 401 at the key field, the key makes it run', async () => {
  check(args.keyedBase && args.keyedKey, '--keyed-base and --keyed-key are needed (scripts/test-web.sh gives them)');
  const { page } = await open({ base: args.keyedBase });
  // the page and its files loaded without a key; its first run did not
  let err = await page.evaluate(() => window.attnd.error);
  eq(await page.evaluate(() => window.attnd.status), 'error', 'the first run without a key');
  eq(err && err.status, 401, 'its status');
  eq(err.field, 'key', 'where the error is shown');
  check(/API key/.test(err.message), 'the message names the key: ' + err.message);
  eq(await page.getAttribute('#api-key', 'aria-invalid'), 'true', 'the key field marked invalid');
  check(await page.isVisible('p.err[data-field="key"]'), 'the error is visible');
  // a wrong key, entered: 401 again, at the same place
  await page.fill('#api-key', 'not-the-key');
  await page.press('#api-key', 'Enter');
  await page.waitForFunction(() => window.attnd.error && window.attnd.error.status === 401 &&
    document.getElementById('api-key').getAttribute('aria-invalid') === 'true', null, { timeout: 20000 });
  err = await page.evaluate(() => window.attnd.error);
  eq(err.field, 'key', 'where a wrong key\'s error is shown');
  // the key, entered: the page loads the models; Run draws, no error left
  await page.fill('#api-key', args.keyedKey);
  await page.press('#api-key', 'Enter');
  await page.waitForFunction(() => window.attnd.models && window.attnd.models.length > 0, null, { timeout: 20000 });
  const before = await page.evaluate(() => window.attnd.settled);
  await page.click('#run');
  eq(await settled(page, before), 'done', 'a run with the key');
  eq(await page.evaluate(() => window.attnd.error), null, 'the error after the run with the key');
  check(await page.getAttribute('#api-key', 'aria-invalid') !== 'true', 'the key field still marked invalid');
  check((await page.evaluate(() => window.attnd.heatmaps.length)) > 0, 'nothing drawn');
  await page.close();
});

test('keyboard: Tab reaches the controls, arrows walk a heatmap, Enter picks the row', async () => {
  const { page } = await open();
  const seen = new Set();
  for (let n = 0; n < 40 && !seen.has('run'); n++) {
    await page.keyboard.press('Tab');
    seen.add(await page.evaluate(() => document.activeElement.id));
  }
  for (const id of ['api-key', 'preset', 'ctl-heads', 'ctl-causal', 'run']) check(seen.has(id), 'Tab never reached #' + id);
  // choose a preset and run it with the keyboard only
  await page.focus('#preset');
  await page.selectOption('#preset', 'causal');
  const before = await page.evaluate(() => window.attnd.settled);
  await page.keyboard.press('Control+Enter');
  eq(await settled(page, before), 'done', 'Ctrl+Enter runs');
  await page.focus('figure.hm[data-heatmap="1"] canvas');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  let tip = await page.evaluate(() => Object.assign({}, document.getElementById('tip').dataset));
  eq(tip.row + ',' + tip.col + ',' + tip.head, '2,2,1', 'keyboard cursor (row, col, head)');
  await page.keyboard.press('Enter');
  eq(await page.evaluate(() => window.attnd.selectedRow), 2, 'Enter selects the row');
  await page.keyboard.press('Escape');
  eq(await page.evaluate(() => window.attnd.selectedRow), null, 'Escape clears it');
  await page.close();
});

test('dark and light colour schemes are readable', async () => {
  for (const scheme of ['light', 'dark']) {
    const { page, problems } = await open({ scheme, hash: 'model-demo' });
    const c = await page.evaluate(() => {
      const s = getComputedStyle(document.body);
      const sec = getComputedStyle(document.getElementById('answer'));
      return { bg: s.backgroundColor, fg: s.color, panel: sec.backgroundColor };
    });
    const lb = luminance(c.bg), lf = luminance(c.fg);
    const contrast = (Math.max(lb, lf) + 0.05) / (Math.min(lb, lf) + 0.05);
    check(contrast >= 7, scheme + ': text contrast ' + contrast.toFixed(1) + ' (' + c.fg + ' on ' + c.bg + ')');
    if (scheme === 'dark') check(lb < 0.05, 'dark background ' + c.bg);
    else check(lb > 0.85, 'light background ' + c.bg);
    check(problems.length === 0, problems.join('; '));
    await shot(page, 'page-' + scheme);
    await page.close();
  }
  // the Theme control wins over the system's choice
  const { page } = await open({ scheme: 'light' });
  await page.selectOption('#theme', 'dark');
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  check(luminance(bg) < 0.05, 'Theme: dark under a light system gives ' + bg);
  await page.selectOption('#theme', 'auto');
  await page.close();
});

if (args.readmeShot) {
  test('README screenshot', async () => {
    const page = await ctx.newPage();
    await page.setViewportSize({ width: 1280, height: 720 });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.goto(args.base + '/#cross');
    await settled(page, 0);
    const before = await page.evaluate(() => window.attnd.settled);
    await page.click('#run'); // a second run: warm timings
    await settled(page, before);
    await page.click('#tokens button[data-row="6"]');
    await page.screenshot({ path: args.readmeShot });
    notes.push('README screenshot ' + args.readmeShot + ' (' + fs.statSync(args.readmeShot).size + ' bytes)');
    await page.close();
  });
}

/* ---- main ------------------------------------------------------------- */

async function main() {
  await launch();
  try {
    for (const t of tests) {
      if (args.k.length && !args.k.some((k) => t.name.includes(k))) continue;
      try {
        await withTimeout(t.fn(), t.timeoutMs, t.name);
        passed++;
        console.log('ok ' + t.name);
      } catch (e) {
        failed++;
        console.log('FAIL ' + t.name + ': ' + (e instanceof Failure ? e.message : (e && e.stack) || e));
      }
    }
  } finally {
    await close();
  }
  for (const n of notes) console.log('# ' + n);
  console.log(passed + ' passed, ' + failed + ' failed');
  process.exit(failed ? 1 : 0);
}

main().catch(async (e) => {
  console.log('FAIL setup: ' + ((e && e.stack) || e));
  await close();
  console.log(passed + ' passed, ' + (failed + 1) + ' failed');
  process.exit(1);
});
