// unknown-fields.cjs - a kubernetes-models model's validation that also
// reports the fields its validator never looked at (the schemas, as
// Kubernetes' own, do not forbid unknown fields, so a misspelt key would
// pass).  Shared by validate.cjs (deploy/) and monitoring.mjs
// (deploy/monitoring); no dependency of its own.
'use strict';

// Validates data with a kubernetes-models model class and returns the
// errors, each prefixed with at: the schema's, then the fields its
// validator never looked at (a Proxy records every key it read).
function checkWithModel(Model, data, at = '') {
  const records = [];
  const proxies = new WeakMap();
  function wrap(v, p) {
    if (v === null || typeof v !== 'object') return v;
    if (proxies.has(v)) return proxies.get(v);
    const rec = { obj: v, path: p, seen: new Set(), enumerated: false };
    records.push(rec);
    const px = new Proxy(v, {
      get(t, k, r) {
        if (typeof k !== 'string') return Reflect.get(t, k, r);
        rec.seen.add(k);
        const child = Reflect.get(t, k, r);
        return Object.prototype.hasOwnProperty.call(t, k) ? wrap(child, `${p}/${k}`) : child;
      },
      has(t, k) {
        if (typeof k === 'string') rec.seen.add(k);
        return Reflect.has(t, k);
      },
      getOwnPropertyDescriptor(t, k) {
        if (typeof k === 'string') rec.seen.add(k);
        return Reflect.getOwnPropertyDescriptor(t, k);
      },
      ownKeys(t) {
        rec.enumerated = true;
        return Reflect.ownKeys(t);
      },
    });
    proxies.set(v, px);
    return px;
  }
  const errors = [];
  try {
    Model.prototype.validate.call(wrap(data, ''));
  } catch (e) {
    for (const m of String(e.message).split(', data')) {
      errors.push(`${at}${m.replace(/^data/, '')}`);
    }
  }
  for (const r of records) {
    if (Array.isArray(r.obj) || r.enumerated || r.seen.size === 0) continue;
    for (const k of Object.keys(r.obj)) {
      if (!r.seen.has(k)) errors.push(`${at}${r.path}/${k}: unknown field (not in the ${Model.name} schema; misspelt?)`);
    }
  }
  return errors;
}

exports.checkWithModel = checkWithModel;
