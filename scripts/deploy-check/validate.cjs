'use strict';
// Offline validation of attnd's deployment manifests.  Run by
// scripts/check-deploy.sh, which installs the pinned packages of
// package.json into build/deploy-check and passes that folder with --deps.
//
//   node validate.cjs --deps DIR kustomize DIR...   render each kustomization
//                                                   (as kustomize would) and
//                                                   validate what it makes
//   node validate.cjs --deps DIR files FILE...      validate every object of
//                                                   the files, as one set
//   node validate.cjs --deps DIR markdown FILE...   validate the objects in
//                                                   the ```yaml blocks
//   node validate.cjs --deps DIR config FILE        print the attnd.json of
//                                                   the ConfigMap in FILE
//
// What "validate" means:
//  - YAML: parsed as YAML 1.1 (what Kubernetes' decoder reads: `yes` is a
//    boolean there), duplicate keys and any parser warning are errors.
//  - Kubernetes objects: kubernetes-models' schema of that apiVersion and
//    kind (types, enums, required fields); an apiVersion/kind it does not
//    have is an error.  Its schemas do not reject unknown fields (the
//    Kubernetes OpenAPI schemas have no additionalProperties: false), so
//    this script also records which fields the schema's validator looks at,
//    object by object, and reports every field it never looked at as
//    unknown (a misspelt `contanerPort`, say).  Objects whose schema has no
//    properties (free-form) and maps (labels) are not checked that way.
//  - KServe objects (serving.kserve.io): the JSON schemas of
//    deploy/kserve/schema/ with ajv, then their core Kubernetes parts
//    (containers, volumes, the predictor's pod fields, metadata) with
//    kubernetes-models as above.
//  - attnd's own rules across the objects of a set: the ones
//    docs/deploy.md explains (service links off, probes on the health
//    endpoints, liveness on metrics_port, a grace period longer than
//    shutdown delay + drain,
//    Guaranteed QoS, the non-root read-only security context, config
//    mounted at /etc/attnd and its port exposed, selectors that match,
//    the InferenceService's runtime and model format served by the
//    ServingRuntime, models read from /mnt/models; Ingress backends that
//    exist, and session affinity done right: ingressRules says how).
//  - kustomize: this script renders the kustomizations itself (resources
//    and JSON 6902 patches: the features the files use; any other field is
//    an error).  When kubectl is installed it also renders them with
//    `kubectl kustomize` and checks that both give the same objects.
//
// Output: one line per object or check ("ok", "FAIL", "skip"), then
// "validate: N passed, M failed, K skipped"; exit 1 if anything failed.

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');
const { execFileSync } = require('child_process');

const args = process.argv.slice(2);
let depsDir = null;
if (args[0] === '--deps') {
  depsDir = path.resolve(args[1]);
  args.splice(0, 2);
}
if (!depsDir || args.length < 2) {
  console.error('usage: node validate.cjs --deps DIR (kustomize DIR...|files FILE...|markdown FILE...|config FILE)');
  process.exit(2);
}
const req = createRequire(path.join(depsDir, 'package.json'));
const YAML = req('yaml');
const Ajv = req('ajv');
const REPO = path.resolve(__dirname, '..', '..');
const SCHEMA_DIR = path.join(REPO, 'deploy', 'kserve', 'schema');

let passed = 0;
let failed = 0;
let skipped = 0;
function ok(label) {
  passed++;
  console.log(`ok    ${label}`);
}
function fail(label, errors) {
  failed++;
  console.log(`FAIL  ${label}`);
  for (const e of [].concat(errors)) console.log(`        ${e}`);
}
function skip(label, why) {
  skipped++;
  console.log(`skip  ${label}: ${why}`);
}
function rel(p) {
  const r = path.relative(process.cwd(), path.resolve(p));
  return r.startsWith('..') ? path.resolve(p) : r || '.';
}

// ---------------------------------------------------------------- YAML

function parseYamlDocs(text, where) {
  const docs = YAML.parseAllDocuments(text, { version: '1.1', uniqueKeys: true, prettyErrors: true });
  const errors = [];
  const values = [];
  for (const d of [].concat(docs)) {
    for (const e of d.errors) errors.push(`${where}: ${e.message}`);
    for (const w of d.warnings) errors.push(`${where}: ${w.message}`);
    if (!d.errors.length) {
      const v = d.toJS({ maxAliasCount: 0 });
      if (v !== null && v !== undefined) values.push(v);
    }
  }
  return { values, errors };
}

function loadObjects(file) {
  const { values, errors } = parseYamlDocs(fs.readFileSync(file, 'utf8'), rel(file));
  return { objects: values.map((o) => ({ obj: o, src: rel(file) })), errors };
}

// ------------------------------------- kubernetes-models, unknown fields

const { checkWithModel } = require('./unknown-fields.cjs');

function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return null;
  let mod;
  try {
    mod = req(`kubernetes-models/${apiVersion}`);
  } catch (e) {
    return null;
  }
  const M = mod[kind];
  if (typeof M !== 'function' || M.apiVersion !== apiVersion || M.kind !== kind) return null;
  return M;
}

const core = req('kubernetes-models/v1');

// ------------------------------------------------------------- KServe

let ajv = null;
const kserveSchemas = {};
function kserveValidator(kind) {
  if (!ajv) {
    // strict, but for tuples: the ServingRuntime schema checks the first
    // container's name with a one-item tuple followed by any number more.
    ajv = new Ajv({ allErrors: true, strict: true, strictTuples: false });
    for (const f of fs.readdirSync(SCHEMA_DIR).filter((n) => n.endsWith('.json')).sort()) {
      const s = JSON.parse(fs.readFileSync(path.join(SCHEMA_DIR, f), 'utf8'));
      ajv.addSchema(s, f);
    }
    kserveSchemas.ServingRuntime = ajv.getSchema('servingruntime.schema.json');
    kserveSchemas.ClusterServingRuntime = kserveSchemas.ServingRuntime;
    kserveSchemas.InferenceService = ajv.getSchema('inferenceservice.schema.json');
  }
  return kserveSchemas[kind] || null;
}

const SR_KSERVE_FIELDS = new Set([
  'supportedModelFormats', 'multiModel', 'disabled', 'protocolVersions', 'workerSpec', 'grpcEndpoint',
  'grpcDataEndpoint', 'httpDataEndpoint', 'replicas', 'storageHelper', 'builtInAdapter', 'labels', 'annotations',
]);
const PREDICTOR_KSERVE_FIELDS = new Set([
  'sklearn', 'xgboost', 'tensorflow', 'pytorch', 'triton', 'onnx', 'huggingface', 'pmml', 'lightgbm', 'paddle',
  'model', 'storageUris', 'workerSpec', 'minReplicas', 'maxReplicas', 'scaleTarget', 'scaleMetric',
  'scaleMetricType', 'autoScaling', 'containerConcurrency', 'timeout', 'canaryTrafficPercent', 'logger', 'batcher',
  'labels', 'annotations', 'deploymentStrategy',
]);
const MODEL_KSERVE_FIELDS = new Set(['modelFormat', 'runtime', 'protocolVersion', 'storageUri', 'runtimeVersion', 'storage']);

function pick(o, keep) {
  const r = {};
  for (const [k, v] of Object.entries(o || {})) if (keep(k)) r[k] = v;
  return r;
}

function checkKserve(obj) {
  const v = kserveValidator(obj.kind);
  if (!v) return [`${obj.apiVersion} ${obj.kind}: no schema for this kind in deploy/kserve/schema`];
  const errors = [];
  if (!v(obj)) {
    for (const e of v.errors) {
      const extra = e.keyword === 'additionalProperties' ? ` '${e.params.additionalProperty}'` : '';
      const allowed = e.params && e.params.allowedValues ? ` (${e.params.allowedValues.join(', ')})` : '';
      const val = e.params && e.params.allowedValue !== undefined ? ` ('${e.params.allowedValue}')` : '';
      errors.push(`${e.instancePath || '/'}: ${e.message}${extra}${allowed}${val}`);
    }
  }
  // metadata, checked as a ConfigMap's (both are plain ObjectMeta)
  if (obj.metadata && typeof obj.metadata === 'object') {
    errors.push(...checkWithModel(core.ConfigMap, { apiVersion: 'v1', kind: 'ConfigMap', metadata: obj.metadata }, '')
      .filter((e) => e.startsWith('/metadata')));
  }
  const spec = obj.spec && typeof obj.spec === 'object' ? obj.spec : {};
  if (obj.kind === 'ServingRuntime' || obj.kind === 'ClusterServingRuntime') {
    (Array.isArray(spec.containers) ? spec.containers : []).forEach((c, i) => {
      errors.push(...checkWithModel(core.Container, c, `/spec/containers/${i}`));
    });
    // the other core fields, checked as the PodSpec fields they are
    const pod = pick(spec, (k) => !SR_KSERVE_FIELDS.has(k) && k !== 'containers');
    errors.push(...checkWithModel(core.PodSpec, { ...pod, containers: [] }, '/spec'));
  } else if (obj.kind === 'InferenceService') {
    const p = spec.predictor && typeof spec.predictor === 'object' ? spec.predictor : {};
    const pod = pick(p, (k) => !PREDICTOR_KSERVE_FIELDS.has(k));
    if (!('containers' in pod)) pod.containers = [];
    errors.push(...checkWithModel(core.PodSpec, pod, '/spec/predictor'));
    if (p.model && typeof p.model === 'object') {
      const c = pick(p.model, (k) => !MODEL_KSERVE_FIELDS.has(k));
      if (!('name' in c)) c.name = 'kserve-container';
      errors.push(...checkWithModel(core.Container, c, '/spec/predictor/model'));
    }
  }
  return errors;
}

// ------------------------------------------------------ one object

function label(o) {
  const name = o.obj && o.obj.metadata && o.obj.metadata.name;
  return `${o.src}: ${o.obj && o.obj.kind}/${name}`;
}

function validateObject(o) {
  const obj = o.obj;
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return ['not a YAML mapping'];
  if (typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') return ['apiVersion and kind are required'];
  if (!obj.metadata || typeof obj.metadata.name !== 'string') return ['metadata.name is required'];
  if (obj.apiVersion.startsWith('serving.kserve.io/')) return checkKserve(obj);
  const M = modelFor(obj.apiVersion, obj.kind);
  if (!M) return [`unknown apiVersion/kind ${obj.apiVersion} ${obj.kind} (not a Kubernetes kind kubernetes-models knows)`];
  return checkWithModel(M, obj, '');
}

// ----------------------------------------------------- attnd's rules

const isAttndImage = (img) => typeof img === 'string' && /(^|\/)attnd([:@]|$)/.test(img);

function quantity(q) {
  if (typeof q === 'number') return q;
  const m = /^([0-9.]+)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$/.exec(String(q));
  if (!m) return NaN;
  const mult = { m: 1e-3, k: 1e3, Ki: 1024, M: 1e6, Mi: 1024 ** 2, G: 1e9, Gi: 1024 ** 3, T: 1e12, Ti: 1024 ** 4 };
  return parseFloat(m[1]) * (m[2] ? mult[m[2]] : 1);
}

function matches(selector, labels) {
  return Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v);
}

function portResolves(port, container) {
  return (container.ports || []).some((p) => p.name === port || p.containerPort === port);
}

function checkAttndPod(where, podSpec, podLabels, objects, errors) {
  const cs = (podSpec.containers || []).filter((c) => isAttndImage(c.image));
  if (!cs.length) return null;
  const c = cs[0];
  const psc = podSpec.securityContext || {};
  const csc = c.securityContext || {};
  const e = (m) => errors.push(`${where}: ${m}`);
  if (podSpec.enableServiceLinks !== false) {
    e('enableServiceLinks must be false (a Service named attnd would set ATTND_PORT=tcp://...)');
  }
  // the config: a ConfigMap mounted at /etc/attnd holding attnd.json
  let cfg = null;
  const mount = (c.volumeMounts || []).find((m) => m.mountPath === '/etc/attnd');
  if (!mount) {
    e('no volume mounted at /etc/attnd (the image reads /etc/attnd/attnd.json)');
  } else {
    const vol = (podSpec.volumes || []).find((v) => v.name === mount.name);
    const cmName = vol && vol.configMap && vol.configMap.name;
    const cm = objects.find((x) => x.obj.kind === 'ConfigMap' && x.obj.metadata.name === cmName);
    if (!cm) e(`the volume at /etc/attnd is not a ConfigMap of this set (${cmName})`);
    else if (!cm.obj.data || typeof cm.obj.data['attnd.json'] !== 'string') e(`ConfigMap ${cmName} has no attnd.json`);
    else {
      try {
        cfg = JSON.parse(cm.obj.data['attnd.json']);
        if (!cfg || typeof cfg !== 'object' || Array.isArray(cfg)) throw new Error('not a JSON object');
      } catch (x) {
        e(`ConfigMap ${cmName} attnd.json: ${x.message}`);
        cfg = null;
      }
    }
  }
  cfg = cfg || {};
  const port = cfg.port === undefined ? 8080 : cfg.port;
  if (!(c.ports || []).some((p) => p.containerPort === port)) e(`no containerPort ${port} (the port of attnd.json)`);
  if (cfg.workers !== undefined && cfg.workers !== 0) {
    e(`workers is ${cfg.workers}: leave it at auto (0) and size with the CPU limit`);
  }
  if (typeof cfg.models_dir === 'string' && !cfg.models_dir.startsWith('/')) {
    e(`models_dir "${cfg.models_dir}" is relative (it would be read under /etc/attnd)`);
  }
  const delay = cfg.shutdown_delay_ms || 0;
  const drain = cfg.drain_timeout_ms === undefined ? 30000 : cfg.drain_timeout_ms;
  const grace = podSpec.terminationGracePeriodSeconds === undefined ? 30 : podSpec.terminationGracePeriodSeconds;
  if (grace * 1000 <= delay + drain) {
    e(`terminationGracePeriodSeconds ${grace} must be longer than shutdown_delay_ms + drain_timeout_ms (${delay} + ${drain} ms)`);
  }
  const probe = (name, p) => {
    const pr = c[name];
    if (!pr) return e(`no ${name}`);
    if (!pr.httpGet) return e(`${name} is not an httpGet probe`);
    if (pr.httpGet.path !== p) e(`${name} checks ${pr.httpGet.path}, not ${p}`);
    if (!portResolves(pr.httpGet.port, c)) e(`${name} port ${pr.httpGet.port} is not a port of the container`);
    return null;
  };
  probe('startupProbe', '/v2/health/ready');
  probe('readinessProbe', '/v2/health/ready');
  probe('livenessProbe', '/v2/health/live');
  // liveness on metrics_port: clients that hold every connection of port
  // (slow uploads) get any new one there a 503, the kubelet's too
  const mport = cfg.metrics_port || 0;
  const mp = (c.ports || []).find((p) => p.containerPort === mport);
  const lp = c.livenessProbe && c.livenessProbe.httpGet && c.livenessProbe.httpGet.port;
  if (!mport) e('metrics_port is not set in attnd.json: the livenessProbe belongs there (port refuses new connections when clients hold all of them)');
  else if (!mp) e(`no containerPort ${mport} (the metrics_port of attnd.json)`);
  else if (lp !== undefined && lp !== mp.name && lp !== mport) {
    e(`livenessProbe port ${lp} is not metrics_port ${mport} (port refuses new connections when clients hold all of them)`);
  }
  const r = c.resources || {};
  for (const res of ['cpu', 'memory']) {
    const rq = r.requests && r.requests[res];
    const lm = r.limits && r.limits[res];
    if (rq === undefined || lm === undefined || quantity(rq) !== quantity(lm)) {
      e(`resources.requests.${res} (${rq}) must equal resources.limits.${res} (${lm}): Guaranteed QoS`);
    }
  }
  const either = (k) => (csc[k] !== undefined ? csc[k] : psc[k]);
  if (either('runAsNonRoot') !== true) e('runAsNonRoot must be true');
  if (either('runAsUser') !== 10001) e('runAsUser must be 10001 (the image\'s user)');
  if (csc.readOnlyRootFilesystem !== true) e('readOnlyRootFilesystem must be true');
  if (csc.allowPrivilegeEscalation !== false) e('allowPrivilegeEscalation must be false');
  if (!(csc.capabilities && (csc.capabilities.drop || []).includes('ALL'))) e('capabilities must drop ALL');
  const sp = either('seccompProfile');
  if (!sp || sp.type !== 'RuntimeDefault') e('seccompProfile must be RuntimeDefault');
  // every mount names a volume, every volume is mounted
  const vols = new Set((podSpec.volumes || []).map((v) => v.name));
  const mounted = new Set();
  for (const x of podSpec.containers || []) for (const m of x.volumeMounts || []) {
    mounted.add(m.name);
    if (!vols.has(m.name)) e(`container ${x.name} mounts volume ${m.name}, which the pod does not have`);
  }
  for (const v of vols) if (!mounted.has(v)) e(`volume ${v} is not mounted`);
  return { container: c, labels: podLabels || {} };
}

function attndRules(objects) {
  const errors = [];
  const pods = [];
  for (const o of objects) {
    const x = o.obj;
    if (!x.metadata.labels || !x.metadata.labels['app.kubernetes.io/name']) {
      errors.push(`${label(o)}: no app.kubernetes.io/name label`);
    }
    if (x.kind === 'Deployment' && x.spec && x.spec.template) {
      const t = x.spec.template;
      const tl = (t.metadata && t.metadata.labels) || {};
      if (!matches(x.spec.selector && x.spec.selector.matchLabels, tl)) {
        errors.push(`${label(o)}: selector does not match the pod template's labels`);
      }
      const pod = checkAttndPod(label(o), t.spec || {}, tl, objects, errors);
      if (pod) pods.push({ ...pod, deployment: x });
    }
  }
  const ourPods = (sel) => pods.filter((p) => matches(sel, p.labels) && Object.keys(sel || {}).length);
  for (const o of objects) {
    const x = o.obj;
    if (x.kind === 'Service') {
      const ps = ourPods(x.spec && x.spec.selector);
      if (!ps.length) errors.push(`${label(o)}: selects no attnd pod of this set`);
      for (const p of ps) for (const sp of (x.spec && x.spec.ports) || []) {
        const tp = sp.targetPort === undefined ? sp.port : sp.targetPort;
        if (!portResolves(tp, p.container)) errors.push(`${label(o)}: targetPort ${tp} is not a port of the attnd container`);
      }
    } else if (x.kind === 'PodDisruptionBudget') {
      if (!ourPods(x.spec && x.spec.selector && x.spec.selector.matchLabels).length) {
        errors.push(`${label(o)}: selects no attnd pod of this set`);
      }
      const hpa = objects.find((h) => h.obj.kind === 'HorizontalPodAutoscaler');
      const min = hpa ? hpa.obj.spec.minReplicas || 1 : null;
      if (min !== null && typeof x.spec.minAvailable === 'number' && x.spec.minAvailable >= min) {
        errors.push(`${label(o)}: minAvailable ${x.spec.minAvailable} >= the autoscaler's minReplicas ${min}: no pod could ever be evicted`);
      }
    } else if (x.kind === 'NetworkPolicy') {
      errors.push(...networkPolicyRules(o, ourPods(x.spec && x.spec.podSelector && x.spec.podSelector.matchLabels), objects));
    } else if (x.kind === 'HorizontalPodAutoscaler') {
      const ref = (x.spec && x.spec.scaleTargetRef) || {};
      const d = pods.find((p) => p.deployment.kind === ref.kind && p.deployment.metadata.name === ref.name);
      if (!d) errors.push(`${label(o)}: scaleTargetRef ${ref.kind}/${ref.name} is not an attnd Deployment of this set`);
      else if ((x.spec.metrics || []).some((m) => m.resource && m.resource.name === 'cpu')
        && !(d.container.resources && d.container.resources.requests && d.container.resources.requests.cpu)) {
        errors.push(`${label(o)}: scales on CPU utilisation but the container requests no CPU`);
      }
      if ((x.spec.minReplicas || 1) > x.spec.maxReplicas) errors.push(`${label(o)}: minReplicas > maxReplicas`);
      // the autoscaler owns the count: a replicas field in the Deployment
      // resets it on every `kubectl apply`
      if (d && d.deployment.spec.replicas !== undefined) {
        errors.push(`${label(o)}: Deployment ${ref.name} sets replicas (${d.deployment.spec.replicas}) beside this autoscaler: every kubectl apply would reset the count; leave it out (minReplicas rules)`);
      }
    }
  }
  errors.push(...ingressRules(objects));
  return errors;
}

// A NetworkPolicy over the attnd pods: it selects some, every port it
// names is one of the attnd container's, and (when it restricts ingress)
// the serving port of every Service in front of those pods is allowed by
// some rule: a policy that forgets it cuts the Service off.
function networkPolicyRules(o, ps, objects) {
  const errors = [];
  const x = o.obj;
  const spec = x.spec || {};
  if (!ps.length) return [`${label(o)}: podSelector selects no attnd pod of this set`];
  const types = spec.policyTypes || ['Ingress'];
  const rules = spec.ingress || [];
  for (const [i, r] of rules.entries()) for (const p of r.ports || []) {
    for (const pod of ps) {
      if (!portResolves(p.port, pod.container)) {
        errors.push(`${label(o)}: ingress rule ${i}: port ${p.port} is not a port of the attnd container`);
      }
    }
  }
  if (!types.includes('Ingress')) return errors;
  const allows = (port, c) => rules.some((r) => !r.ports || !r.ports.length
    || r.ports.some((p) => p.port === undefined || p.port === port
      || (c.ports || []).some((cp) => (cp.name === p.port || cp.containerPort === p.port) && (cp.name === port || cp.containerPort === port))));
  for (const s of objects.filter((y) => y.obj.kind === 'Service')) {
    const sel = (s.obj.spec && s.obj.spec.selector) || {};
    for (const pod of ps) {
      if (!matches(sel, pod.labels) || !Object.keys(sel).length) continue;
      for (const sp of (s.obj.spec && s.obj.spec.ports) || []) {
        const tp = sp.targetPort === undefined ? sp.port : sp.targetPort;
        if (!allows(tp, pod.container)) {
          errors.push(`${label(o)}: no ingress rule allows port ${tp}, which Service ${s.obj.metadata.name} sends to: the policy would cut the Service off`);
        }
      }
    }
  }
  return errors;
}

// Ingresses (ingress-nginx): every backend is a Service of this set and
// one of its ports; with session affinity (upstream-hash-by on some
// Ingress), the hash is the affinity header, the session paths reach a
// hashed backend, and no Service and port is both hashed and not (one
// balancer per Service and port in ingress-nginx: the first Ingress to
// name it would set it for all).
const HASH_BY = 'nginx.ingress.kubernetes.io/upstream-hash-by';
const AFFINITY_HASH = '$http_x_attnd_affinity';
const SESSION_PATHS = ['/v1/sessions/chat-1:s0/attend', '/v2/models/kv_attention/infer'];

function ingressRules(objects) {
  const errors = [];
  const ings = objects.filter((o) => o.obj.kind === 'Ingress');
  const routes = []; // { o, path, pathType, key, hash }
  for (const o of ings) {
    const ann = o.obj.metadata.annotations || {};
    const hash = ann[HASH_BY];
    if (hash !== undefined) {
      if (hash !== AFFINITY_HASH) {
        errors.push(`${label(o)}: ${HASH_BY} is "${hash}"; it must be "${AFFINITY_HASH}" (the header X-Attnd-Affinity, docs/deploy.md)`);
      }
      if (String(ann['nginx.ingress.kubernetes.io/service-upstream']) === 'true') {
        errors.push(`${label(o)}: service-upstream "true" hands the hashed connection to the ClusterIP (kube-proxy balances it again)`);
      }
    }
    const spec = o.obj.spec || {};
    const backends = [];
    if (spec.defaultBackend) backends.push({ path: '/', pathType: 'Prefix', backend: spec.defaultBackend });
    for (const r of spec.rules || []) for (const p of (r.http && r.http.paths) || []) backends.push(p);
    for (const p of backends) {
      const svc = p.backend && p.backend.service;
      if (!svc) {
        errors.push(`${label(o)}: path ${p.path}: no backend service`);
        continue;
      }
      const s = objects.find((x) => x.obj.kind === 'Service' && x.obj.metadata.name === svc.name);
      const port = svc.port || {};
      if (!s) {
        errors.push(`${label(o)}: path ${p.path}: service ${svc.name} is not a Service of this set`);
      } else if (!((s.obj.spec && s.obj.spec.ports) || []).some((sp) => sp.name === port.name || sp.port === port.number)) {
        errors.push(`${label(o)}: path ${p.path}: port ${port.name || port.number} is not a port of Service ${svc.name}`);
      }
      routes.push({ o, path: p.path, pathType: p.pathType, key: `${svc.name}:${port.name || port.number}`, hash });
    }
  }
  if (!routes.some((r) => r.hash !== undefined)) return errors;
  const byKey = new Map();
  for (const r of routes) {
    if (!byKey.has(r.key)) byKey.set(r.key, new Set());
    byKey.get(r.key).add(r.hash === undefined ? '(none)' : r.hash);
  }
  for (const [key, hashes] of byKey) {
    if (hashes.size > 1) {
      errors.push(`Service ${key} is shared by hashed and unhashed Ingress paths (${[...hashes].join(', ')}): ingress-nginx has one balancer per Service and port; give the session paths a Service of their own`);
    }
  }
  // the route ingress-nginx picks for a request path: the longest match
  const matchLen = (r, url) => {
    if (r.pathType === 'Exact') return r.path === url ? r.path.length : -1;
    const p = r.path.replace(/\/+$/, '');
    return url === p || url.startsWith(`${p}/`) || p === '' ? p.length : -1;
  };
  for (const url of SESSION_PATHS) {
    let best = null;
    for (const r of routes) if (matchLen(r, url) >= 0 && (!best || matchLen(r, url) > matchLen(best, url))) best = r;
    if (!best) errors.push(`no Ingress path routes ${url}`);
    else if (best.hash === undefined) {
      errors.push(`${url} goes to ${label(best.o)} (path ${best.path}), which has no ${HASH_BY}: sessions would be spread over the pods`);
    }
  }
  return errors;
}

// KServe's deployment modes: the annotation serving.kserve.io/deploymentMode
// (Serverless when absent: KServe's default).  In Serverless mode Knative
// builds the pod and its webhook refuses pod spec and container fields it
// does not manage (knative.dev/serving pkg/apis/serving/fieldmask.go and
// k8s_validation.go).  Checked here, on the predictor's pod fields, its
// containers and the ServingRuntime's (merged into the same pod):
const DEPLOYMENT_MODE = 'serving.kserve.io/deploymentMode';
const DEPLOYMENT_MODES = ['Serverless', 'RawDeployment', 'ModelMesh'];
// pod fields Knative always refuses
const KNATIVE_POD_NEVER = [
  'terminationGracePeriodSeconds', 'restartPolicy', 'activeDeadlineSeconds', 'nodeName', 'hostname', 'subdomain',
  'priority', 'readinessGates', 'preemptionPolicy', 'overhead', 'ephemeralContainers',
];
// pod fields behind a Knative feature flag (config-features) that is off
// by default: kubernetes.podspec-<name>
const KNATIVE_POD_FLAGGED = [
  'securityContext', 'initContainers', 'hostNetwork', 'hostPID', 'hostIPC', 'shareProcessNamespace', 'dnsPolicy',
  'dnsConfig', 'schedulerName', 'priorityClassName', 'runtimeClassName', 'hostAliases', 'topologySpreadConstraints',
];
// container fields Knative refuses
const KNATIVE_CONTAINER_NEVER = ['lifecycle', 'stdin', 'stdinOnce', 'tty', 'volumeDevices', 'resizePolicy'];

function knativeRules(where, pod, containers) {
  const errors = [];
  for (const k of KNATIVE_POD_NEVER) {
    if (pod[k] !== undefined) errors.push(`${where}: ${k}: Knative (Serverless mode) refuses this pod spec field; use RawDeployment, or leave it out`);
  }
  for (const k of KNATIVE_POD_FLAGGED) {
    if (pod[k] !== undefined) errors.push(`${where}: ${k}: Knative (Serverless mode) refuses this pod spec field unless its feature flag is on (config-features, off by default)`);
  }
  let withPorts = 0;
  for (const c of containers) {
    const cw = `${where}: container ${c.name || '(unnamed)'}`;
    for (const k of KNATIVE_CONTAINER_NEVER) {
      if (c[k] !== undefined) errors.push(`${cw}: ${k}: Knative (Serverless mode) refuses this container field`);
    }
    const ports = c.ports || [];
    if (ports.length) withPorts++;
    if (ports.length > 1) errors.push(`${cw}: ${ports.length} ports: Knative (Serverless mode) allows one container port (the serving one)`);
    for (const p of ports) {
      if (p.hostPort !== undefined || p.hostIP !== undefined) errors.push(`${cw}: port ${p.containerPort}: Knative refuses hostPort and hostIP`);
      if (p.name !== undefined && !['http1', 'h2c'].includes(p.name)) {
        errors.push(`${cw}: port name "${p.name}": Knative allows only http1 or h2c`);
      }
    }
  }
  if (withPorts > 1) errors.push(`${where}: ${withPorts} containers with ports: Knative (Serverless mode) allows ports on one container only`);
  return errors;
}

function deploymentMode(o) {
  const a = (o.obj.metadata && o.obj.metadata.annotations) || {};
  return a[DEPLOYMENT_MODE] === undefined ? 'Serverless' : a[DEPLOYMENT_MODE];
}

function kserveRules(objects) {
  const errors = [];
  const runtimes = objects.filter((o) => o.obj.kind === 'ServingRuntime' || o.obj.kind === 'ClusterServingRuntime');
  for (const o of runtimes) {
    const s = o.obj.spec || {};
    const c = (s.containers || [])[0] || {};
    if (!isAttndImage(c.image)) continue;
    const env = Object.fromEntries((c.env || []).map((v) => [v.name, v.value]));
    const a = (c.args || []).join(' ');
    const dir = /--models-dir[= ](\S+)/.exec(a);
    const modelsDir = dir ? dir[1] : env.ATTND_MODELS_DIR;
    if (modelsDir !== '/mnt/models') {
      errors.push(`${label(o)}: attnd must read its models from /mnt/models (ATTND_MODELS_DIR or --models-dir), not ${modelsDir}`);
    }
    const port = (s.annotations || {})['prometheus.kserve.io/port'];
    if (port !== undefined && !(c.ports || []).some((p) => String(p.containerPort) === port)) {
      errors.push(`${label(o)}: prometheus.kserve.io/port ${port} is not a port of kserve-container`);
    }
    for (const [k, p] of [['readinessProbe', '/v2/health/ready'], ['livenessProbe', '/v2/health/live']]) {
      if (c[k] && !(c[k].httpGet && c[k].httpGet.path === p)) errors.push(`${label(o)}: ${k} must be httpGet ${p}`);
    }
  }
  for (const o of objects.filter((x) => x.obj.kind === 'InferenceService')) {
    const p = (o.obj.spec && o.obj.spec.predictor) || {};
    const m = p.model || {};
    const mode = deploymentMode(o);
    if (!DEPLOYMENT_MODES.includes(mode)) {
      errors.push(`${label(o)}: ${DEPLOYMENT_MODE} "${mode}" is not one of ${DEPLOYMENT_MODES.join(', ')}`);
    }
    const rt = m.runtime ? runtimes.find((r) => r.obj.metadata.name === m.runtime) : null;
    if (mode === 'Serverless') {
      // the predictor's pod fields, its containers and the model's
      // container fields (merged into the runtime's first container), and
      // the runtime's pod fields and containers
      const pod = pick(p, (k) => !PREDICTOR_KSERVE_FIELDS.has(k) && k !== 'containers');
      const mc = pick(m, (k) => !MODEL_KSERVE_FIELDS.has(k));
      errors.push(...knativeRules(`${label(o)} (Serverless)`, pod,
        [...(p.containers || []), ...(Object.keys(mc).length ? [{ name: 'kserve-container (model)', ...mc }] : [])]));
      if (rt) {
        const rs = rt.obj.spec || {};
        errors.push(...knativeRules(`${label(rt)} (runtime of Serverless ${o.obj.metadata.name})`,
          pick(rs, (k) => !SR_KSERVE_FIELDS.has(k) && k !== 'containers'), rs.containers || []));
      }
    }
    if (!m.runtime) continue;
    if (!rt) {
      errors.push(`${label(o)}: runtime ${m.runtime} is not a ServingRuntime of this set`);
      continue;
    }
    const s = rt.obj.spec || {};
    const c = (s.containers || [])[0] || {};
    if (isAttndImage(c.image)) {
      const env = Object.fromEntries((c.env || []).map((v) => [v.name, v.value]));
      const delay = Number(env.ATTND_SHUTDOWN_DELAY_MS || 0);
      const drain = Number(env.ATTND_DRAIN_TIMEOUT_MS || 30000);
      // Serverless: Knative sets the pod's grace period to the revision's
      // timeout (the predictor's timeout, 300 s by default)
      const g = mode === 'Serverless' ? p.timeout : p.terminationGracePeriodSeconds;
      const grace = g === undefined ? (mode === 'Serverless' ? 300 : 30) : g;
      const what = mode === 'Serverless' ? 'timeout (Knative\'s grace period)' : 'terminationGracePeriodSeconds';
      if (grace * 1000 <= delay + drain) {
        errors.push(`${label(o)}: ${what} ${grace} must be longer than the runtime's shutdown delay + drain (${delay} + ${drain} ms)`);
      }
    }
    const fmt = m.modelFormat && m.modelFormat.name;
    if (!(s.supportedModelFormats || []).some((f) => f.name === fmt)) {
      errors.push(`${label(o)}: model format ${fmt} is not one runtime ${m.runtime} supports`);
    }
    if (m.protocolVersion && s.protocolVersions && !s.protocolVersions.includes(m.protocolVersion)) {
      errors.push(`${label(o)}: protocolVersion ${m.protocolVersion} is not one runtime ${m.runtime} speaks`);
    }
  }
  return errors;
}

// -------------------------------------------------------- kustomize

const KUSTOMIZATION_SCHEMA = {
  type: 'object',
  required: ['apiVersion', 'kind', 'resources'],
  additionalProperties: false,
  properties: {
    apiVersion: { const: 'kustomize.config.k8s.io/v1beta1' },
    kind: { const: 'Kustomization' },
    resources: { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
    patches: {
      type: 'array',
      items: {
        type: 'object',
        required: ['path', 'target'],
        additionalProperties: false,
        properties: {
          path: { type: 'string' },
          target: {
            type: 'object',
            required: ['kind', 'name'],
            additionalProperties: false,
            properties: { group: { type: 'string' }, version: { type: 'string' }, kind: { type: 'string' }, name: { type: 'string' } },
          },
        },
      },
    },
  },
};
let kustomizationValidator = null;

function pointer(p) {
  if (p === '') return [];
  if (!p.startsWith('/')) throw new Error(`bad JSON pointer ${p}`);
  return p.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function applyJson6902(doc, ops) {
  for (const op of ops) {
    const parts = pointer(op.path);
    const last = parts.pop();
    let parent = doc;
    for (const k of parts) {
      if (parent === null || typeof parent !== 'object' || !(k in parent)) throw new Error(`${op.op} ${op.path}: no ${k}`);
      parent = parent[k];
    }
    const isArr = Array.isArray(parent);
    const idx = last === '-' ? parent.length : Number(last);
    if (op.op === 'add') {
      if (isArr) parent.splice(idx, 0, op.value);
      else parent[last] = op.value;
    } else if (op.op === 'replace' || op.op === 'remove') {
      if (!(last in parent)) throw new Error(`${op.op} ${op.path}: nothing there`);
      if (op.op === 'replace') parent[last] = op.value;
      else if (isArr) parent.splice(idx, 1);
      else delete parent[last];
    } else if (op.op === 'test') {
      if (JSON.stringify(parent[last]) !== JSON.stringify(op.value)) throw new Error(`test ${op.path} failed`);
    } else {
      throw new Error(`op ${op.op} is not supported by this renderer`);
    }
  }
}

function render(dir, errors, stack = []) {
  dir = path.resolve(dir);
  if (stack.includes(dir)) {
    errors.push(`${rel(dir)}: kustomization cycle`);
    return [];
  }
  const kfile = path.join(dir, 'kustomization.yaml');
  if (!fs.existsSync(kfile)) {
    errors.push(`${rel(dir)}: no kustomization.yaml`);
    return [];
  }
  const { values, errors: yerr } = parseYamlDocs(fs.readFileSync(kfile, 'utf8'), rel(kfile));
  errors.push(...yerr);
  const k = values[0];
  if (!kustomizationValidator) kustomizationValidator = new Ajv({ allErrors: true, strict: true }).compile(KUSTOMIZATION_SCHEMA);
  if (!kustomizationValidator(k)) {
    for (const e of kustomizationValidator.errors) {
      const extra = e.params.additionalProperty ? ` '${e.params.additionalProperty}' (not supported here: extend validate.cjs)` : '';
      errors.push(`${rel(kfile)}${e.instancePath}: ${e.message}${extra}`);
    }
    return [];
  }
  const used = new Set([kfile]);
  let objects = [];
  for (const r of k.resources) {
    const p = path.resolve(dir, r);
    if (!fs.existsSync(p)) {
      errors.push(`${rel(kfile)}: resource ${r} does not exist`);
    } else if (fs.statSync(p).isDirectory()) {
      objects = objects.concat(render(p, errors, stack.concat(dir)));
    } else {
      used.add(p);
      const l = loadObjects(p);
      errors.push(...l.errors);
      objects = objects.concat(l.objects);
    }
  }
  for (const pt of k.patches || []) {
    const p = path.resolve(dir, pt.path);
    used.add(p);
    if (!fs.existsSync(p)) {
      errors.push(`${rel(kfile)}: patch ${pt.path} does not exist`);
      continue;
    }
    const { values: pv, errors: perr } = parseYamlDocs(fs.readFileSync(p, 'utf8'), rel(p));
    errors.push(...perr);
    if (!Array.isArray(pv[0])) {
      errors.push(`${rel(p)}: only JSON 6902 patches (a list of operations) are supported here`);
      continue;
    }
    const t = pt.target;
    const hits = objects.filter((o) => {
      const [g, v] = o.obj.apiVersion.includes('/') ? o.obj.apiVersion.split('/') : ['', o.obj.apiVersion];
      return o.obj.kind === t.kind && o.obj.metadata.name === t.name
        && (t.group === undefined || t.group === g) && (t.version === undefined || t.version === v);
    });
    if (!hits.length) errors.push(`${rel(kfile)}: patch ${pt.path} matches no object`);
    for (const o of hits) {
      try {
        applyJson6902(o.obj, pv[0]);
        o.src = `${o.src} + ${rel(p)}`;
      } catch (x) {
        errors.push(`${rel(p)}: ${x.message}`);
      }
    }
  }
  for (const f of fs.readdirSync(dir)) {
    const p = path.join(dir, f);
    if (/\.ya?ml$/.test(f) && !used.has(p)) errors.push(`${rel(p)}: not listed in ${rel(kfile)} (forgotten?)`);
  }
  const ids = new Set();
  for (const o of objects) {
    const id = `${o.obj.kind}/${o.obj.metadata && o.obj.metadata.name}`;
    if (ids.has(id)) errors.push(`${rel(dir)}: ${id} appears twice`);
    ids.add(id);
  }
  return objects;
}

function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// null when kubectl can cross-check, else why not.  Debian 12 packages
// kubectl (kubernetes-client) at 1.20, whose built-in kustomize (v2.0.3)
// renders the base but not the overlays (a folder as a resource, patches
// with a target): kustomize v4 came with kubectl 1.21.
let kubectlWhyNot;
function kubectlUnusable() {
  if (kubectlWhyNot !== undefined) return kubectlWhyNot;
  let v;
  try {
    v = JSON.parse(execFileSync('kubectl', ['version', '--client', '-o', 'json'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 20000 }));
  } catch (e) {
    kubectlWhyNot = 'kubectl is not installed (1.21 or later would cross-check; the kubernetes-client of Debian 12 is 1.20, too old for the overlays): rendered by this script only';
    return kubectlWhyNot;
  }
  const cv = v.clientVersion || {};
  const minor = parseInt(cv.minor, 10);
  if (cv.major === '1' && minor < 21) {
    kubectlWhyNot = `kubectl ${cv.gitVersion} has kustomize v2 built in, which cannot render the overlays (kubectl 1.21 or later): rendered by this script only`;
  } else {
    kubectlWhyNot = null;
  }
  return kubectlWhyNot;
}

function crossCheckKubectl(dir, objects) {
  const lbl = `${rel(dir)}: kubectl kustomize gives the same objects`;
  const whyNot = kubectlUnusable();
  if (whyNot) return skip(lbl, whyNot);
  let out;
  try {
    out = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60000 });
  } catch (e) {
    return fail(lbl, `kubectl kustomize failed: ${(e.stderr || e.message).trim()}`);
  }
  const theirs = parseYamlDocs(out, 'kubectl kustomize').values.map(canonical).sort();
  const ours = objects.map((o) => canonical(o.obj)).sort();
  const onlyOurs = ours.filter((x) => !theirs.includes(x));
  const onlyTheirs = theirs.filter((x) => !ours.includes(x));
  if (!onlyOurs.length && !onlyTheirs.length) return ok(lbl);
  return fail(lbl, [...onlyOurs.map((x) => `only here: ${x.slice(0, 200)}`), ...onlyTheirs.map((x) => `only kubectl: ${x.slice(0, 200)}`)]);
}

// ------------------------------------------------------------- main

function validateSet(setLabel, objects, loadErrors) {
  if (loadErrors.length) fail(`${setLabel}: files`, loadErrors);
  for (const o of objects) {
    const errs = validateObject(o);
    if (errs.length) fail(label(o), errs);
    else ok(label(o));
  }
  const valid = objects.filter((o) => o.obj && typeof o.obj === 'object' && o.obj.metadata && o.obj.kind);
  const rules = attndRules(valid.filter((o) => !o.obj.apiVersion.startsWith('serving.kserve.io/')))
    .concat(kserveRules(valid));
  if (rules.length) fail(`${setLabel}: attnd's rules (docs/deploy.md)`, rules);
  else ok(`${setLabel}: attnd's rules (docs/deploy.md)`);
}

const [cmd, ...targets] = args;
if (cmd === 'kustomize') {
  for (const dir of targets) {
    const errors = [];
    const objects = render(dir, errors);
    if (!objects.length && !errors.length) errors.push('renders no object');
    validateSet(`${rel(path.resolve(dir))} (kustomize)`, objects, errors);
    if (!errors.length) crossCheckKubectl(dir, objects);
  }
} else if (cmd === 'files') {
  let objects = [];
  const errors = [];
  for (const f of targets) {
    const l = loadObjects(f);
    errors.push(...l.errors);
    objects = objects.concat(l.objects);
  }
  if (!objects.length && !errors.length) errors.push('no object in these files');
  validateSet(targets.map((t) => rel(path.resolve(t))).join(' '), objects, errors);
} else if (cmd === 'markdown') {
  for (const f of targets) {
    const text = fs.readFileSync(f, 'utf8');
    // fenced blocks, also indented ones (in a list item)
    const blocks = [...text.matchAll(/^( *)```ya?ml\n([\s\S]*?)^\1```$/gm)];
    let n = 0;
    blocks.forEach((b, i) => {
      const line = text.slice(0, b.index).split('\n').length;
      const where = `${rel(f)}:${line}`;
      const body = b[2].split('\n').map((l) => l.slice(b[1].length)).join('\n');
      const { values, errors } = parseYamlDocs(body, where);
      if (errors.length) return fail(`${where}: yaml block ${i + 1}`, errors);
      for (const v of values) {
        if (!v || typeof v !== 'object' || !v.apiVersion || !v.kind) continue;
        n++;
        const o = { obj: v, src: where };
        if (String(v.apiVersion).startsWith('kustomize.config.k8s.io/')) {
          skip(`${where}: ${v.kind}`, 'a kustomization shown as an example: only the folders are rendered');
          continue;
        }
        const errs = validateObject(o);
        if (errs.length) fail(label(o), errs);
        else ok(label(o));
      }
      return null;
    });
    if (!n) skip(rel(f), 'no Kubernetes object in its yaml blocks');
  }
} else if (cmd === 'config') {
  const { objects, errors } = loadObjects(targets[0]);
  const cm = objects.find((o) => o.obj.kind === 'ConfigMap' && o.obj.data && o.obj.data['attnd.json']);
  if (errors.length || !cm) {
    console.error(errors.concat(cm ? [] : [`${targets[0]}: no ConfigMap with attnd.json`]).join('\n'));
    process.exit(1);
  }
  process.stdout.write(cm.obj.data['attnd.json']);
  process.exit(0);
} else {
  console.error(`validate.cjs: unknown command ${cmd}`);
  process.exit(2);
}
console.log(`validate: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
