// mha.js - ONNX Runtime's CPU attention for a prefill (self-attention over
// n tokens): the node half of bench/prefill_peers (issue 45), which runs
// it; not meant to be run by hand (the argument is one JSON object).
//
// The model is built here with onnx-proto, as gqa.js does.  One graph of
// op (com.microsoft):
//   "mha": MultiHeadAttention, query, key, value [1, n, H*D] (the 3-d,
//          unpacked form), attribute num_heads; causal through attribute
//          unidirectional = 1 (a = causal "attr"), or an additive
//          attention_bias [1, 1, n, n] of 0 / -inf fed as an input
//          (causal "bias").
//   "gqa": GroupQueryAttention, query, key, value [1, n, H*D], kv_num_heads
//          = num_heads = H, no past (the prompt), seqlens_k [1] = n - 1,
//          total_sequence_length = n, do_rotary 0.  The CPU kernel is
//          always causal (its prompt mask is the lower triangle).
// With weights (a.weights): input x [1, n, E] (E = H*D), initializers wq,
// wk, wv, wo [E, E] ([in, out]), MatMul x wq / wk / wv -> the op -> MatMul
// wo: ORT's form of attention with projections.  No biases (attnd's side
// has none either).
//
// Argument (JSON): {mode: "check" | "time", op, n, H, D, weights, causal:
//   "none" | "attr" | "bias", dtype: "float32" | "float16", threads, in,
//   out, clock: "cpu" | "wall", reps (0 = adaptive), budget (seconds)}.
//   check: reads x, wq, wk, wv, wo (weights) or q, k, v (raw little-endian
//   float32 files' concatenation, in this order) from `in`, converts to
//   fp16 when dtype is float16, runs once, writes the output as float32 to
//   `out`.  time: random inputs, one warm-up, then timed runs of
//   session.run.  Prints one JSON line; exit 3 when onnxruntime-node or
//   onnx-proto cannot be loaded (the caller skips ORT with a note), exit 1
//   with {error: "run", msg} when ORT refuses the model or the run.
'use strict';

const fs = require('fs');
const {ort, onnx, vinfo, intAttr, encodeModel, clock, timeRuns,
       runMain} = require('./ortutil');

const a = JSON.parse(process.argv[2]);
const {n, H, D} = a;
const E = H * D;
const f16 = a.dtype === 'float16';
const TP = onnx.TensorProto.DataType;
const ELEM = f16 ? TP.FLOAT16 : TP.FLOAT;

// float32 -> IEEE half bits, round to nearest even.
const f32buf = new Float32Array(1), u32buf = new Uint32Array(f32buf.buffer);
function toHalf(x) {
  f32buf[0] = x;
  const b = u32buf[0], sign = (b >>> 16) & 0x8000;
  let e = ((b >>> 23) & 0xff) - 127 + 15, m = b & 0x7fffff;
  if (((b >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (m ? 0x200 : 0);
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    m |= 0x800000;
    const shift = 14 - e, half = 1 << (shift - 1);
    let r = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    if (rem > half || (rem === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (e << 10) | (m >>> 13);
  const rem = m & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (r & 1))) r++;
  return sign | r;
}

function fromHalf(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >>> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * Math.pow(2, -24);
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * Math.pow(2, e - 15);
}

function typed(f32) {
  if (!f16) return f32;
  const h = new Uint16Array(f32.length);
  for (let i = 0; i < f32.length; i++) h[i] = toHalf(f32[i]);
  return h;
}

function initializer(name, f32, dims) {
  const t = typed(f32);
  return onnx.TensorProto.create({
    name, dims, dataType: ELEM,
    rawData: new Uint8Array(t.buffer, t.byteOffset, t.byteLength),
  });
}

function buildModel(w) {
  const nodes = [], inits = [], inputs = [];
  let q = 'query', k = 'key', v = 'value';
  if (a.weights) {
    inputs.push(vinfo('x', ELEM, [1, n, E]));
    for (const [i, nm] of ['wq', 'wk', 'wv', 'wo'].entries()) {
      inits.push(initializer(nm, w[i], [E, E]));
    }
    for (const [nm, wn] of [['q', 'wq'], ['k', 'wk'], ['v', 'wv']]) {
      nodes.push(onnx.NodeProto.create({opType: 'MatMul', name: 'proj_' + nm,
                                        input: ['x', wn], output: [nm]}));
    }
    q = 'q'; k = 'k'; v = 'v';
  } else {
    inputs.push(vinfo('query', ELEM, [1, n, E]), vinfo('key', ELEM, [1, n, E]),
                vinfo('value', ELEM, [1, n, E]));
  }
  const att = a.weights ? 'heads' : 'output';
  if (a.op === 'mha') {
    const ins = [q, k, v];
    const attrs = [intAttr('num_heads', H)];
    if (a.causal === 'attr') attrs.push(intAttr('unidirectional', 1));
    if (a.causal === 'bias') {
      // inputs: query key value bias key_padding_mask attention_bias
      ins.push('', '', 'attention_bias');
      inputs.push(vinfo('attention_bias', ELEM, [1, 1, n, n]));
    }
    nodes.push(onnx.NodeProto.create({opType: 'MultiHeadAttention', domain: 'com.microsoft',
                                      name: 'mha', input: ins, output: [att], attribute: attrs}));
  } else {
    inits.push(onnx.TensorProto.create({name: 'seqlens_k', dims: [1], dataType: TP.INT32,
                                        int32Data: [n - 1]}));
    inits.push(onnx.TensorProto.create({name: 'total_sequence_length', dims: [],
                                        dataType: TP.INT32, int32Data: [n]}));
    nodes.push(onnx.NodeProto.create({
      opType: 'GroupQueryAttention', domain: 'com.microsoft', name: 'gqa',
      input: [q, k, v, '', '', 'seqlens_k', 'total_sequence_length'],
      output: [att],
      attribute: [intAttr('num_heads', H), intAttr('kv_num_heads', H), intAttr('do_rotary', 0)],
    }));
  }
  if (a.weights) {
    nodes.push(onnx.NodeProto.create({opType: 'MatMul', name: 'proj_o',
                                      input: [att, 'wo'], output: ['output']}));
  }
  const graph = onnx.GraphProto.create({
    name: 'prefill', node: nodes, initializer: inits, input: inputs,
    output: [vinfo('output', ELEM, [1, n, E])],
  });
  return encodeModel(graph, 'attnd bench/prefill_peers');
}

function rand(len, seed, scale) {
  // xorshift32: U(-scale, scale)
  const arr = new Float32Array(len);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < len; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    arr[i] = (s / 4294967296 * 2 - 1) * scale;
  }
  return arr;
}

function ten(f32, dims) {
  return new ort.Tensor(f16 ? 'float16' : 'float32', typed(f32), dims);
}

async function main() {
  const t0 = Date.now();
  let acts, w = null;
  const nx = n * E;
  if (a.mode === 'check') {
    const raw = fs.readFileSync(a.in);
    let off = raw.byteOffset;
    const take = (len) => {
      const f = new Float32Array(raw.buffer.slice(off, off + len * 4));
      off += len * 4;
      return f;
    };
    if (a.weights) {
      acts = [take(nx)];
      w = [take(E * E), take(E * E), take(E * E), take(E * E)];
    } else {
      acts = [take(nx), take(nx), take(nx)];
    }
  } else {
    const ws = 1 / Math.sqrt(E);
    acts = a.weights ? [rand(nx, 1, 1)] : [rand(nx, 1, 1), rand(nx, 2, 1), rand(nx, 3, 1)];
    if (a.weights) w = [rand(E * E, 4, ws), rand(E * E, 5, ws), rand(E * E, 6, ws), rand(E * E, 7, ws)];
  }
  const session = await ort.InferenceSession.create(buildModel(w), {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  if (a.weights) {
    feeds.x = ten(acts[0], [1, n, E]);
  } else {
    feeds.query = ten(acts[0], [1, n, E]);
    feeds.key = ten(acts[1], [1, n, E]);
    feeds.value = ten(acts[2], [1, n, E]);
  }
  if (a.op === 'mha' && a.causal === 'bias') {
    const b = new Float32Array(n * n);
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) b[i * n + j] = -Infinity;
    feeds.attention_bias = ten(b, [1, 1, n, n]);
  }
  const setup = (Date.now() - t0) / 1e3;
  const now = clock(a.clock);
  let last = null;
  const step = async () => {
    const s = now();
    last = await session.run(feeds);
    return now() - s;
  };
  if (a.mode === 'check') {
    await step();
    const o = last.output.data;
    if (o.length !== nx) throw new Error('unexpected output size ' + o.length);
    const f = new Float32Array(nx);
    for (let i = 0; i < nx; i++) f[i] = f16 ? fromHalf(o[i]) : o[i];
    fs.writeFileSync(a.out, Buffer.from(f.buffer));
    console.log(JSON.stringify({ok: true, ort: ort.env.versions.common}));
    return;
  }
  await timeRuns(step, a, setup);
}

runMain(main);
