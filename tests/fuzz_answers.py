"""A stand-in interpreter for tests: runs the real one (FUZZ_REAL_PYTHON), then rewrites a probe's JSON answer with
values of the wrong type (seeded by FUZZ_SEED), as a hostile or broken environment might. Used as --python."""

import json
import os
import random
import subprocess
import sys

REAL = os.environ["FUZZ_REAL_PYTHON"]
SEED = int(os.environ.get("FUZZ_SEED", "0"))
JUNK = [None, 0, 12345678901, -1.5, "", "x" * 50, [], ["a", 1, None], {}, {"a": {"b": []}}, True]


def mutate(rnd, o):
    if isinstance(o, dict):
        return {k: rnd.choice(JUNK) if rnd.random() < 0.15 else mutate(rnd, v) for k, v in o.items()}
    if isinstance(o, list):
        return [rnd.choice(JUNK) if rnd.random() < 0.15 else mutate(rnd, v) for v in o]
    return o


def main():
    args = sys.argv[1:]
    env = dict(os.environ)
    # A probe's watchdog kills it when its parent is not the process that started it: this stand-in is that
    # process now, so it names itself (otherwise every fuzzed probe dies before it answers, and nothing is fuzzed).
    if "DSV4_DOCTOR_PARENT_PID" in env:
        env["DSV4_DOCTOR_PARENT_PID"] = str(os.getpid())
    code = subprocess.call([REAL] + args, env=env)
    # A probe script is run as `python script.py answer.json request`; anything else passes through unchanged.
    if args and args[0].endswith(".py") and len(args) >= 2 and os.path.isfile(args[1]):
        rnd = random.Random("%d:%s" % (SEED, os.path.basename(args[0])))
        try:
            with open(args[1]) as fh:
                data = json.load(fh)
        except ValueError:
            sys.exit(code)
        with open(args[1], "w") as fh:
            json.dump(mutate(rnd, data), fh)
    sys.exit(code)


main()
