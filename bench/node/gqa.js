// gqa.js - ONNX Runtime's CPU GroupQueryAttention (com.microsoft) for one
// decode step: the node half of bench/decode_peers (issue 42), which runs
// it; not meant to be run by hand (the argument is one JSON object).
//
// The model is built here with onnx-proto: one GroupQueryAttention node,
// inputs query [B, 1, H*D], key and value [B, 1, Hkv*D] (the new token),
// past_key and past_value [B, Hkv, T-1, D], seqlens_k [B] (int32, total - 1
// = T - 1) and total_sequence_length (int32 scalar, T); outputs output
// [B, 1, H*D], present_key and present_value [B, Hkv, T, D]; attributes
// num_heads, kv_num_heads (scale: 1/sqrt(D), the default).  One step so
// attends over T tokens.  Only `output` is fetched: ORT allocates the
// presents and copies the past into them each step.  (Its buffer-sharing
// form, past and present one buffer, needs I/O binding, which
// onnxruntime-node has not for CPU; a pre-allocated present fetch is
// copied back from ORT's own buffer after the run, which costs more.)
//
// Argument (JSON): {mode: "check" | "time", B, T, H, Hkv, D,
//   dtype: "float32" | "float16", threads, in, out (check mode: raw
//   little-endian files), clock: "cpu" | "wall", reps (0 = adaptive),
//   budget (seconds)}.  check: reads q, k, v, past_key, past_value (in this
//   order, dtype elements) from `in`, runs once, writes output then
//   present_key (dtype) to `out`.  time: random inputs, one warm-up, then
//   timed runs of session.run; cpu = the process's CPU time
//   (process.cpuUsage, every thread), wall = hrtime.  Prints one JSON line;
//   exit 3 when onnxruntime-node or onnx-proto cannot be loaded (the caller
//   skips ORT with a note).
'use strict';

const fs = require('fs');
const {ort, onnx, vinfo, intAttr, encodeModel, clock, timeRuns,
       runMain} = require('./ortutil');

const a = JSON.parse(process.argv[2]);
const {B, T, H, Hkv, D} = a;
const f16 = a.dtype === 'float16';
const ELEM = f16 ? onnx.TensorProto.DataType.FLOAT16 : onnx.TensorProto.DataType.FLOAT;
const INT32 = onnx.TensorProto.DataType.INT32;

function buildModel() {
  const node = onnx.NodeProto.create({
    opType: 'GroupQueryAttention',
    domain: 'com.microsoft',
    name: 'gqa',
    input: ['query', 'key', 'value', 'past_key', 'past_value', 'seqlens_k',
            'total_sequence_length'],
    output: ['output', 'present_key', 'present_value'],
    attribute: [intAttr('num_heads', H), intAttr('kv_num_heads', Hkv)],
  });
  const graph = onnx.GraphProto.create({
    name: 'decode_step',
    node: [node],
    input: [
      vinfo('query', ELEM, [B, 1, H * D]), vinfo('key', ELEM, [B, 1, Hkv * D]),
      vinfo('value', ELEM, [B, 1, Hkv * D]), vinfo('past_key', ELEM, [B, Hkv, T - 1, D]),
      vinfo('past_value', ELEM, [B, Hkv, T - 1, D]), vinfo('seqlens_k', INT32, [B]),
      vinfo('total_sequence_length', INT32, []),
    ],
    output: [
      // present: [B, Hkv, T, D] at run time; symbolic here, since ORT's
      // shape inference for the op gives the past's length (a warning).
      vinfo('output', ELEM, [B, 1, H * D]), vinfo('present_key', ELEM, [B, Hkv, 'present', D]),
      vinfo('present_value', ELEM, [B, Hkv, 'present', D]),
    ],
  });
  return encodeModel(graph, 'attnd bench/decode_peers');
}

function typed(n) {
  return f16 ? new Uint16Array(n) : new Float32Array(n);
}

function fill(arr, seed) {
  // xorshift32: U(-1, 1) for fp32; for fp16 the bits of +-[0.5, 1).
  let s = seed >>> 0 || 1;
  for (let i = 0; i < arr.length; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    const u = s / 4294967296 * 2 - 1;
    arr[i] = f16 ? ((u < 0 ? 0x8000 : 0) | (14 << 10) | (s & 0x3ff)) : u;
  }
  return arr;
}

function ten(arr, dims) {
  return new ort.Tensor(f16 ? 'float16' : 'float32', arr, dims);
}

async function main() {
  const t0 = Date.now();
  const session = await ort.InferenceSession.create(buildModel(), {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const nq = B * H * D, nk = B * Hkv * D, nc = B * Hkv * (T - 1) * D;
  let q, k, v, pk, pv;
  if (a.mode === 'check') {
    const raw = fs.readFileSync(a.in);
    const E = f16 ? 2 : 4;
    let off = raw.byteOffset;
    const take = (n) => {
      const buf = raw.buffer.slice(off, off + n * E);
      off += n * E;
      return f16 ? new Uint16Array(buf) : new Float32Array(buf);
    };
    q = take(nq); k = take(nk); v = take(nk); pk = take(nc); pv = take(nc);
  } else {
    q = fill(typed(nq), 1); k = fill(typed(nk), 2); v = fill(typed(nk), 3);
    pk = fill(typed(nc), 4); pv = fill(typed(nc), 5);
  }
  const feeds = {
    query: ten(q, [B, 1, H * D]), key: ten(k, [B, 1, Hkv * D]),
    value: ten(v, [B, 1, Hkv * D]), past_key: ten(pk, [B, Hkv, T - 1, D]),
    past_value: ten(pv, [B, Hkv, T - 1, D]),
    seqlens_k: new ort.Tensor('int32', new Int32Array(B).fill(T - 1), [B]),
    total_sequence_length: new ort.Tensor('int32', new Int32Array([T]), []),
  };
  const fetches = a.mode === 'check' ? ['output', 'present_key'] : ['output'];
  const setup = (Date.now() - t0) / 1e3;

  const now = clock(a.clock);
  let last = null;
  const step = async () => {
    const s = now();
    last = await session.run(feeds, fetches);
    return now() - s;
  };

  if (a.mode === 'check') {
    await step();
    const o = last.output.data, p = last.present_key.data;
    const E = f16 ? 2 : 4;
    if (o.length !== nq || p.length !== B * Hkv * T * D) throw new Error('unexpected output sizes');
    fs.writeFileSync(a.out, Buffer.concat([
      Buffer.from(o.buffer, o.byteOffset, nq * E),
      Buffer.from(p.buffer, p.byteOffset, p.length * E),
    ]));
    console.log(JSON.stringify({ok: true, ort: ort.env.versions.common}));
    return;
  }
  await timeRuns(step, a, setup);
}

runMain(main);
