// Offline validation of attnd's monitoring kit (deploy/monitoring).  Run
// by scripts/check-deploy.sh with the packages of package.json installed
// in --deps DIR (an ES module: @kubernetes-models/prometheus-operator is
// one).
//
//   node monitoring.mjs --deps DIR manifests FILE...
//       every object of the files against its schema: the Prometheus
//       Operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule) and
//       KEDA's (ScaledObject) from @kubernetes-models, the core kinds from
//       kubernetes-models; unknown fields are errors (as validate.cjs
//       does it).  Then attnd's rules against deploy/k8s: the monitors
//       select attnd's pods (or the Service over them) and scrape a port
//       named there on /metrics, the autoscalers scale the Deployment
//       attnd, and kustomization.yaml lists files that exist.
//   node monitoring.mjs --deps DIR rules PROMETHEUSRULE OUT
//       write the PrometheusRule's spec (its groups) to OUT, a plain
//       Prometheus rules file, for promtool.
//   node monitoring.mjs --deps DIR promql --exposition METRICS --out OUT FILE...
//       every PromQL expression of the files (rules, the Grafana
//       dashboard's targets and variables, the KEDA trigger's query,
//       prometheus-adapter's seriesQuery): the metric names it uses must
//       be in METRICS (the text of a running attnd's /metrics); OUT gets
//       them as recording rules, so that `promtool check rules OUT`
//       parses each one (Grafana's $variables replaced by plain values).
//
// Output: "ok"/"FAIL" lines, then "monitoring: N passed, M failed"; exit 1
// if anything failed.

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

import { checkWithModel } from './unknown-fields.cjs';

const args = process.argv.slice(2);
if (args[0] !== '--deps' || args.length < 4) {
  console.error('usage: node monitoring.mjs --deps DIR (manifests FILE...|rules FILE OUT|promql --exposition F --out F FILE...)');
  process.exit(2);
}
const depsDir = path.resolve(args[1]);
const [cmd, ...rest] = args.slice(2);
const req = createRequire(path.join(depsDir, 'package.json'));
const YAML = req('yaml');
const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
const depUrl = (spec) => new URL(`file://${req.resolve(spec.split('/').slice(0, 2).join('/') + '/package.json')}`);

let passed = 0;
let failed = 0;
const ok = (l) => { passed++; console.log(`ok    ${l}`); };
const fail = (l, errs) => {
  failed++;
  console.log(`FAIL  ${l}`);
  for (const e of [].concat(errs)) console.log(`        ${e}`);
};
const rel = (p) => path.relative(process.cwd(), path.resolve(p)) || '.';

function loadYaml(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'), { version: '1.1', uniqueKeys: true });
  const errors = [];
  const values = [];
  for (const d of [].concat(docs)) {
    for (const e of [...d.errors, ...d.warnings]) errors.push(`${rel(file)}: ${e.message}`);
    if (!d.errors.length) {
      const v = d.toJS({ maxAliasCount: 0 });
      if (v !== null && v !== undefined) values.push(v);
    }
  }
  return { values, errors };
}

// ------------------------------------------------------------- schemas

async function modelFor(apiVersion, kind) {
  let mod = null;
  try {
    if (apiVersion === 'monitoring.coreos.com/v1') {
      const pkg = '@kubernetes-models/prometheus-operator';
      mod = await import(new URL('monitoring.coreos.com/v1/index.js', depUrl(pkg)).href);
    } else if (apiVersion === 'keda.sh/v1alpha1') {
      mod = req('@kubernetes-models/keda/keda.sh/v1alpha1');
    } else {
      mod = req(`kubernetes-models/${apiVersion}`);
    }
  } catch (e) {
    return null;
  }
  const M = mod[kind];
  return typeof M === 'function' && M.apiVersion === apiVersion && M.kind === kind ? M : null;
}

// ------------------------------------------------------- attnd's rules

const matches = (sel, labels) =>
  !!sel && typeof sel === 'object' && Object.keys(sel.matchLabels || {}).length > 0 && !sel.matchExpressions &&
  Object.entries(sel.matchLabels).every(([k, v]) => labels && labels[k] === v);

function base() {
  const objs = [];
  for (const f of ['deployment.yaml', 'service.yaml']) objs.push(...loadYaml(path.join(REPO, 'deploy/k8s', f)).values);
  const dep = objs.find((o) => o.kind === 'Deployment' && o.metadata.name === 'attnd');
  const c = dep.spec.template.spec.containers.find((x) => /(^|\/)attnd([:@]|$)/.test(x.image)) ||
    dep.spec.template.spec.containers[0];
  return { dep, podLabels: dep.spec.template.metadata.labels, ports: c.ports || [] };
}

function attndRules(objects) {
  const { dep, podLabels, ports } = base();
  const metricsPort = ports.find((p) => p.name === 'metrics');
  const errs = [];
  const services = objects.filter((o) => o.obj.kind === 'Service');
  for (const { obj, src } of objects) {
    const where = `${src}: ${obj.kind}/${obj.metadata.name}`;
    const spec = obj.spec || {};
    if (obj.kind === 'Service' && obj.metadata.name === 'attnd-metrics') {
      if (!matches({ matchLabels: spec.selector }, podLabels)) errs.push(`${where}: its selector does not select attnd's pods`);
      for (const p of spec.ports || []) {
        if (!ports.some((cp) => cp.name === p.targetPort || cp.containerPort === p.targetPort)) {
          errs.push(`${where}: targetPort ${p.targetPort} is not a port of attnd's container`);
        }
      }
      if (!metricsPort || !(spec.ports || []).some((p) => p.targetPort === 'metrics' || p.targetPort === metricsPort.containerPort)) {
        errs.push(`${where}: does not expose the container port metrics`);
      }
    }
    if (obj.kind === 'ServiceMonitor') {
      const svc = services.filter((s) => matches(spec.selector, s.obj.metadata.labels));
      if (svc.length !== 1) {
        errs.push(`${where}: its selector picks ${svc.length} Services of the kit (want attnd-metrics alone)`);
      }
      for (const ep of spec.endpoints || []) {
        if (svc.length && !(svc[0].obj.spec.ports || []).some((p) => p.name === ep.port)) {
          errs.push(`${where}: port ${ep.port} is not a port of Service ${svc[0].obj.metadata.name}`);
        }
        if (ep.path !== '/metrics') errs.push(`${where}: path ${ep.path} is not /metrics`);
      }
    }
    if (obj.kind === 'PodMonitor') {
      if (!matches(spec.selector, podLabels)) errs.push(`${where}: its selector does not select attnd's pods`);
      for (const ep of spec.podMetricsEndpoints || []) {
        if (!ports.some((p) => p.name === ep.port)) errs.push(`${where}: port ${ep.port} is not a port of attnd's container`);
        if (ep.port !== 'metrics') errs.push(`${where}: port ${ep.port} is not metrics (metrics_port)`);
        if (ep.path !== '/metrics') errs.push(`${where}: path ${ep.path} is not /metrics`);
      }
    }
    if (obj.kind === 'ScaledObject' || obj.kind === 'HorizontalPodAutoscaler') {
      const t = spec.scaleTargetRef || {};
      if (t.kind !== 'Deployment' || t.name !== dep.metadata.name) {
        errs.push(`${where}: scales ${t.kind}/${t.name}, not the Deployment ${dep.metadata.name}`);
      }
    }
  }
  return errs;
}

async function manifests(files) {
  const objects = [];
  for (const f of files) {
    if (path.basename(f) === 'kustomization.yaml') {
      const { values, errors } = loadYaml(f);
      const k = values[0] || {};
      const errs = [...errors];
      for (const r of k.resources || []) {
        if (!fs.existsSync(path.join(path.dirname(f), r))) errs.push(`resource ${r}: no such file`);
      }
      for (const key of Object.keys(k)) {
        if (!['apiVersion', 'kind', 'resources'].includes(key)) errs.push(`${key}: a field this check does not know`);
      }
      if (errs.length) fail(`${rel(f)}: Kustomization`, errs); else ok(`${rel(f)}: Kustomization (${(k.resources || []).length} resources)`);
      continue;
    }
    const { values, errors } = loadYaml(f);
    if (errors.length) fail(rel(f), errors);
    for (const obj of values) objects.push({ obj, src: rel(f) });
  }
  for (const { obj, src } of objects) {
    const l = `${src}: ${obj.kind}/${obj.metadata && obj.metadata.name}`;
    if (!obj.metadata || typeof obj.metadata.name !== 'string') { fail(l, 'metadata.name is required'); continue; }
    const M = await modelFor(obj.apiVersion, obj.kind);
    if (!M) { fail(l, `unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`); continue; }
    const errs = checkWithModel(M, obj);
    if (errs.length) fail(l, errs); else ok(`${l} (${obj.apiVersion} schema)`);
  }
  const errs = attndRules(objects);
  if (errs.length) fail('attnd\'s rules (deploy/k8s\'s labels and ports)', errs);
  else ok('attnd\'s rules: selectors, ports, /metrics and scale targets match deploy/k8s');
}

// --------------------------------------------------------------- PromQL

const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless',
  'bool', 'offset', 'inf', 'nan', 'atan2', 'start', 'end',
  // aggregation operators: "sum by (x) (...)" puts no "(" right after them
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile']);

// The metric names of a PromQL expression: identifiers that are not a
// function (followed by "("), a keyword, a label name inside {...} or in
// by/without/on/ignoring/group_x (...), a string, a duration or a number.
function metricNames(expr) {
  let s = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  s = s.replace(/\{[^{}]*\}/g, '{}');
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '$1');
  s = s.replace(/\[[^\]]*\]/g, '[]');
  const names = new Set();
  const re = /[A-Za-z_:][A-Za-z0-9_:]*/g;
  let m;
  while ((m = re.exec(s))) {
    const w = m[0];
    const prev = s[m.index - 1];
    if (prev && /[0-9.]/.test(prev)) continue; // 1e9, 5m
    if (/^\s*\(/.test(s.slice(re.lastIndex))) continue; // a function
    if (KEYWORDS.has(w.toLowerCase())) continue;
    names.add(w);
  }
  return [...names];
}

// Grafana's variables, replaced by values PromQL parses.
function grafanaToPromQL(expr) {
  return expr.replace(/\$__rate_interval|\$__interval|\$__range|\$\{__rate_interval\}/g, '5m')
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?/g, '.*');
}

function* walkDashboard(d, where) {
  for (const p of d.panels || []) {
    for (const t of p.targets || []) if (t.expr) yield { expr: t.expr, where: `${where}: panel "${p.title}" ${t.refId}` };
    if (p.panels) yield* walkDashboard(p, where);
  }
  for (const v of (d.templating && d.templating.list) || []) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : v.query && v.query.query;
    const m = /^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)$/.exec(q || '');
    if (m) yield { expr: m[1], where: `${where}: variable ${v.name}` };
    else if (q) yield { expr: q, where: `${where}: variable ${v.name}` };
  }
}

function expressions(file) {
  const out = [];
  if (file.endsWith('.json')) {
    out.push(...walkDashboard(JSON.parse(fs.readFileSync(file, 'utf8')), rel(file)));
    return out.map((e) => ({ ...e, expr: grafanaToPromQL(e.expr) }));
  }
  for (const doc of loadYaml(file).values) {
    if (doc.kind === 'PrometheusRule') {
      for (const g of doc.spec.groups || []) {
        for (const r of g.rules || []) out.push({ expr: r.expr, where: `${rel(file)}: ${r.alert || r.record}` });
      }
    } else if (doc.kind === 'ScaledObject') {
      for (const t of doc.spec.triggers || []) {
        if (t.type === 'prometheus') out.push({ expr: t.metadata.query, where: `${rel(file)}: trigger ${t.name}` });
      }
    } else if (doc.rules && Array.isArray(doc.rules.custom)) {
      doc.rules.custom.forEach((r, i) => out.push({ expr: r.seriesQuery, where: `${rel(file)}: rules.custom[${i}].seriesQuery` }));
    }
  }
  return out;
}

function exposed(text) {
  const names = new Set();
  for (const line of text.split('\n')) {
    const m = /^# TYPE ([A-Za-z_:][A-Za-z0-9_:]*) (\w+)/.exec(line);
    if (m) {
      names.add(m[1]);
      if (m[2] === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(m[1] + s);
      if (m[2] === 'summary') for (const s of ['_sum', '_count']) names.add(m[1] + s);
    }
    const s = /^([A-Za-z_:][A-Za-z0-9_:]*)[{ ]/.exec(line);
    if (s) names.add(s[1]);
  }
  return names;
}

function promql(argv) {
  let expo = null;
  let out = null;
  const files = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--exposition') expo = argv[++i];
    else if (argv[i] === '--out') out = argv[++i];
    else files.push(argv[i]);
  }
  const have = exposed(fs.readFileSync(expo, 'utf8'));
  if (!have.has('attnd_ready')) { fail(`${expo}: not attnd's /metrics (no attnd_ready)`, []); return; }
  const exprs = files.flatMap(expressions);
  const used = new Set();
  const rules = [];
  for (const { expr, where } of exprs) {
    const names = metricNames(expr);
    const missing = names.filter((n) => !have.has(n));
    names.forEach((n) => used.add(n));
    if (!names.length) fail(`${where}: no metric name found in ${JSON.stringify(expr)}`, []);
    else if (missing.length) fail(`${where}: not in attnd's /metrics: ${missing.join(', ')}`, [expr.trim()]);
    else ok(`${where}: ${names.join(', ')}`);
    rules.push({ record: `attnd_check:q${rules.length + 1}`, expr: expr.trim(), labels: { where: where.slice(0, 200) } });
  }
  if (!exprs.length) fail('no PromQL expression found', files.map(rel));
  fs.writeFileSync(out, YAML.stringify({ groups: [{ name: 'attnd-monitoring-queries', rules }] }));
  console.log(`${exprs.length} expressions, ${used.size} metric names: ${[...used].sort().join(' ')}`);
}

// ---------------------------------------------------------------- main

if (cmd === 'manifests') {
  await manifests(rest);
} else if (cmd === 'rules') {
  const [file, out] = rest;
  const rule = loadYaml(file).values.find((o) => o.kind === 'PrometheusRule');
  if (!rule || !rule.spec || !Array.isArray(rule.spec.groups)) fail(`${rel(file)}: no PrometheusRule with spec.groups`, []);
  else {
    fs.writeFileSync(out, YAML.stringify({ groups: rule.spec.groups }));
    ok(`${rel(file)}: ${rule.spec.groups.length} group(s) written to ${out}`);
  }
} else if (cmd === 'promql') {
  promql(rest);
} else {
  console.error(`unknown command ${cmd}`);
  process.exit(2);
}
console.log(`monitoring: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
