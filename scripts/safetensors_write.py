"""safetensors_write.py - the one .safetensors writer of the repository's
Python: scripts/make_demo_model.py (the committed demo weights),
tests/integration/test_precision.py (F32, F16 and BF16 weights of
resident models) and bench/model_memory.py (a BF16 model).

A file is an 8-byte little-endian header length, the JSON header (each
tensor's dtype, shape and data_offsets, in the order given), padded with
spaces to a multiple of 8 bytes, then the tensors' bytes, one after the
other.  No safetensors package is needed, nor numpy here: a tensor's data
is any array with .shape and .tobytes() (numpy's), already in the file's
encoding, little-endian: "<f4" for F32, "<f2" for F16, and for BF16 the
bfloat16 bits as "<u2" (each caller rounds to bfloat16 its own way).

Importing: scripts/ runs its scripts with this folder on sys.path; from
tests/ and bench/ one line puts it there, e.g.
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
"""

import json
import struct

# bytes per value of each dtype written here
ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2}


def write(path, tensors, compact=False):
    """Write tensors, (name, dtype, array) in file order, to path.

    compact: the JSON header without spaces (json.dumps separators ","
    and ":"), as the committed config/models/demo.safetensors has it;
    otherwise json.dumps's default ", " and ": ", as the tests' and the
    bench's files have always been written.  Either reads the same.
    """
    header, blobs, off = {}, [], 0
    for name, dtype, a in tensors:
        raw = a.tobytes()
        n = 1
        for d in a.shape:
            n *= d
        if len(raw) != n * ITEMSIZE[dtype]:
            raise ValueError("%s: %d bytes for %s %r" %
                             (name, len(raw), dtype, list(a.shape)))
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":") if compact else None)
    h = h.encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
