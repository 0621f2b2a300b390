"""tritonclient.http for tests/readme_examples.py where the package is not
installed (CI has no PyPI): the part of its API that README.md's snippet
uses, on top of tests/integration/tritonclient_imitation.py, which sends
what the real client sends, byte for byte, and reads the answers as it
does.  Numpy in, numpy out, as the real one.  Only for 127.0.0.1 (the
imitation's host): the README test points localhost:8080 there."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "integration"))
from tritonclient_imitation import (TcClient, TcError,  # noqa: E402
                                    tc_input, tc_output)

InferenceServerException = TcError

_NP = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16,
       "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}


class InferInput:
    def __init__(self, name, shape, datatype):
        self._name, self._shape, self._datatype = name, list(shape), datatype
        self._t = None

    def name(self):
        return self._name

    def set_data_from_numpy(self, input_tensor, binary_data=True):
        a = np.asarray(input_tensor)
        if list(a.shape) != self._shape:
            raise InferenceServerException(
                0, "got unexpected numpy array shape [%s], expected [%s]" %
                (", ".join(map(str, a.shape)),
                 ", ".join(map(str, self._shape))))
        want = _NP.get(self._datatype)
        if want is not None and a.dtype != np.dtype(want):
            raise InferenceServerException(
                0, "got unexpected datatype %s from numpy array, expected %s"
                % (a.dtype, self._datatype))
        self._t = tc_input(self._name, self._shape, self._datatype,
                           a.ravel().tolist(), binary_data)
        return self


class InferRequestedOutput:
    def __init__(self, name, binary_data=True, class_count=0):
        self._t = tc_output(name, binary_data, class_count)


class InferResult:
    def __init__(self, result):
        self._r = result

    def as_numpy(self, name):
        if name not in self._r.outputs:
            return None
        dt, shape, vals, _ = self._r.outputs[name]
        return np.array(vals, dtype=_NP[dt]).reshape(shape)

    def get_response(self):
        return self._r.response


class InferenceServerClient:
    def __init__(self, url, **kw):
        host, port = url.rsplit(":", 1)
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError("the tritonclient stand-in only reaches 127.0.0.1")
        self._c = TcClient(int(port))

    def close(self):
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __getattr__(self, name):
        # is_server_live/ready, is_model_ready, get_server_metadata,
        # get_model_metadata, get_inference_statistics,
        # get_model_repository_index, load_model, unload_model
        return getattr(self._c, name)

    def infer(self, model_name, inputs, model_version="", outputs=None,
              **kw):
        return InferResult(self._c.infer(
            model_name, [i._t for i in inputs], model_version,
            [o._t for o in outputs] if outputs else None, **kw))
