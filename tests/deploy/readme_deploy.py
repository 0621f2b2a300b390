#!/usr/bin/env python3
"""Run the README's Deploy commands verbatim.

Every ```sh block of README.md's "## Deploy" section that follows the line
`<!-- run by tests/deploy/readme_deploy.py -->` is run with `bash -e` from
the repository's top, in the order they stand, in one shell (so an `eval`
or `export` in one block holds for the next), each bounded in time.  Blocks
without the mark (a cluster, a systemd host) are not run here; their files
are checked by scripts/check-deploy.sh instead.  Needs what the blocks need
(root, a Docker engine or the right to start one); the blocks stop what
they start.  Prints the blocks' output (indented), one line per block, and
"N passed, M failed" last.
"""
import os
import subprocess
import sys

MARK = "<!-- run by tests/deploy/readme_deploy.py -->"
TIMEOUT_S = 900


def blocks(readme):
    text = open(readme, encoding="utf-8").read()
    section = text.split("\n## Deploy", 1)[1].split("\n## ", 1)[0]
    out = []
    parts = section.split(MARK)
    for part in parts[1:]:
        body = part.split("```sh\n", 1)[1].split("```", 1)[0]
        out.append(body)
    return out


def main():
    top = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    found = blocks(os.path.join(top, "README.md"))
    if not found:
        print("readme_deploy: no marked block in README.md's Deploy section")
        print("0 passed, 1 failed")
        return 1
    # one shell for all blocks, so that an export in one holds for the
    # next; set -e ends the run at the first failing command
    script = ""
    for i, b in enumerate(found):
        script += "set -e\n%s\nset +e\necho '@@block %d ok'\n" % (b, i)
    try:
        p = subprocess.run(["bash", "-c", script], cwd=top, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=TIMEOUT_S * len(found))
        out = p.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") \
            if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += "\n(timed out)"
    for line in out.splitlines():
        if not line.startswith("@@block"):
            print("  | " + line)
    passed = sum(1 for i in range(len(found)) if "@@block %d ok" % i in out)
    for i, b in enumerate(found):
        first = b.strip().splitlines()[0]
        print("%s README Deploy block %d (%s)" %
              ("ok" if "@@block %d ok" % i in out else "FAIL", i + 1, first))
    print("%d passed, %d failed" % (passed, len(found) - passed))
    return 0 if passed == len(found) else 1


if __name__ == "__main__":
    sys.exit(main())
