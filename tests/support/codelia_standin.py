#!/usr/bin/env python3
"""A stand-in Codelia runtime: replays a recording made against the real runtime.

usage: codelia_standin.py RECORDING [--log-in FILE] [--log-out FILE] [--exit-code N]

RECORDING is a capture from tests/fixtures/codelia/ (one {"t", "dir", "msg"} per line).
Its lines are played in order:

  out     (UI -> runtime)  read one line from stdin: what the UI sends at that point
  in      (runtime -> UI)  write msg to stdout as one compact JSON line
  stderr                   write msg to stderr
  exit                     exit with msg.returncode (or --exit-code)
  note                     skipped

--log-in receives the exact bytes read from stdin, --log-out the exact bytes written
to stdout, so that a test can compare both ends of a relay byte for byte. The end of
stdin before an `out` line ends the replay (exit code 0).
"""

import json
import sys


def main(argv):
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    recording = argv[0]
    opts = {"--log-in": None, "--log-out": None, "--exit-code": None}
    rest = argv[1:]
    while rest:
        key = rest.pop(0)
        if key not in opts or not rest:
            sys.stderr.write("unknown or incomplete option: %s\n" % key)
            return 2
        opts[key] = rest.pop(0)
    log_in = open(opts["--log-in"], "wb") if opts["--log-in"] else None
    log_out = open(opts["--log-out"], "wb") if opts["--log-out"] else None
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    code = 0
    with open(recording, encoding="utf-8") as f:
        for raw in f:
            raw = raw.strip()
            if not raw:
                continue
            line = json.loads(raw)
            direction = line.get("dir")
            msg = line.get("msg")
            if direction == "out":
                got = stdin.readline()
                if log_in:
                    log_in.write(got)
                    log_in.flush()
                if not got:
                    return 0
            elif direction == "in":
                data = (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
                stdout.write(data)
                stdout.flush()
                if log_out:
                    log_out.write(data)
                    log_out.flush()
            elif direction == "stderr":
                sys.stderr.write("%s\n" % msg)
                sys.stderr.flush()
            elif direction == "exit":
                code = (msg or {}).get("returncode", 0)
                break
    if opts["--exit-code"] is not None:
        code = int(opts["--exit-code"])
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
