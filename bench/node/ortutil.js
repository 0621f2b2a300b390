// ortutil.js - what the ONNX Runtime peers (gqa.js for bench/decode_peers,
// mha.js for bench/prefill_peers) share: loading onnxruntime-node and
// onnx-proto (exit 3 with a JSON line when either cannot be loaded: the
// caller skips ORT with a note), the ValueInfo and attribute builders of a
// model and its encoding, and the timing loop (one warm-up, then reps runs
// or as many as fit the budget, 3 to 25; the median and the minimum).
'use strict';

let ort, onnx;
try {
  ort = require('onnxruntime-node');
  onnx = require('onnx-proto').onnx;
} catch (e) {
  console.log(JSON.stringify({error: 'load', msg: String(e && e.message || e)}));
  process.exit(3);
}

// A tensor's ValueInfo; a string dim is symbolic.
function vinfo(name, elem, dims) {
  return onnx.ValueInfoProto.create({
    name,
    type: onnx.TypeProto.create({
      tensorType: onnx.TypeProto.Tensor.create({
        elemType: elem,
        shape: onnx.TensorShapeProto.create(
            {dim: dims.map((d) => onnx.TensorShapeProto.Dimension.create(
                typeof d === 'string' ? {dimParam: d} : {dimValue: d}))}),
      }),
    }),
  });
}

function intAttr(name, v) {
  return onnx.AttributeProto.create({name, type: onnx.AttributeProto.AttributeType.INT, i: v});
}

// The serialized model of a graph: IR 8, opsets ai.onnx 17 and
// com.microsoft 1 (the contrib attention ops).
function encodeModel(graph, producerName) {
  const model = onnx.ModelProto.create({
    irVersion: 8,
    producerName,
    opsetImport: [
      onnx.OperatorSetIdProto.create({domain: '', version: 17}),
      onnx.OperatorSetIdProto.create({domain: 'com.microsoft', version: 1}),
    ],
    graph,
  });
  return onnx.ModelProto.encode(model).finish();
}

// The clock: 'cpu' = the process's CPU time (every thread), else wall.
function clock(kind) {
  if (kind === 'cpu') {
    return () => {
      const u = process.cpuUsage();
      return (u.user + u.system) * 1e-6;
    };
  }
  return () => Number(process.hrtime.bigint()) * 1e-9;
}

// step: async () => seconds of one run; a: the argument (reps, budget);
// setup: seconds to build the session.  Prints the JSON record {ms
// (median), ms_min, k, setup_s, ort}.
async function timeRuns(step, a, setup) {
  const warm = await step();
  const k = a.reps || Math.max(3, Math.min(25, Math.floor((a.budget || 1.5) / Math.max(warm, 1e-9))));
  const ts = [];
  for (let i = 0; i < k; i++) ts.push(await step());
  ts.sort((x, y) => x - y);
  const med = k % 2 ? ts[k >> 1] : 0.5 * (ts[k / 2 - 1] + ts[k / 2]);
  console.log(JSON.stringify({ms: med * 1e3, ms_min: ts[0] * 1e3, k, setup_s: setup,
                              ort: ort.env.versions.common}));
}

// Runs the async main; a failure is the JSON line {error: 'run', msg}
// and exit status 1.
function runMain(main) {
  main().catch((e) => {
    console.log(JSON.stringify({error: 'run', msg: String(e && e.message || e)}));
    process.exit(1);
  });
}

module.exports = {ort, onnx, vinfo, intAttr, encodeModel, clock, timeRuns, runMain};
