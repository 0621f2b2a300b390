#!/usr/bin/env python3
"""Convert docs/openapi.yaml (the API description) to the JSON that attnd
serves at GET /openapi.json.

Usage: scripts/openapi_json.py -o openapi.json docs/openapi.yaml

Reads the YAML with PyYAML (Debian's python3-yaml, which
scripts/install-deps.sh installs) as plain data: no tags, no anchors
beyond the YAML core, every mapping key a string.  Writes compact JSON
with the keys in the document's order, so builds repeat byte for byte.
meson runs this as a custom_target; scripts/embed_web.py then embeds the
JSON in the binary (src/server/web.c serves it).
"""

import argparse
import json
import os
import sys

try:
    import yaml
except ImportError:
    sys.exit("openapi_json: PyYAML is missing (apt-get install python3-yaml, "
             "or scripts/install-deps.sh)")


def check_keys(node, where="$"):
    """Every mapping key a string: JSON has no other kind."""
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str):
                sys.exit("openapi_json: %s: key %r is not a string (quote it)"
                         % (where, k))
            check_keys(v, "%s.%s" % (where, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_keys(v, "%s[%d]" % (where, i))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("yaml_file")
    args = ap.parse_args()
    with open(args.yaml_file, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or "openapi" not in doc:
        sys.exit("openapi_json: %s is not an OpenAPI document" %
                 args.yaml_file)
    check_keys(doc)
    text = json.dumps(doc, ensure_ascii=True, separators=(",", ":"),
                      allow_nan=False) + "\n"
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
