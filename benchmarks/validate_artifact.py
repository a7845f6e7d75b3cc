"""``rlinf validate`` with provenance: the command run in this process, its result kept as an artifact.

It saves its ``validate.json`` (every
plan's predicted and measured time, each measured iteration, the summary) as an artifact with the command,
commit, date, cores and load average, and the profiled trace beside it (``ARTIFACT_trace.json``).

    python benchmarks/validate_artifact.py --artifact docs/grpo_validate.json examples/grpo_arith.yaml \\
        --set eval.enabled=false

Every argument after the options below goes to ``rlinf validate`` unchanged (``--out`` is set here).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import suite

from executor import WorkerError
from rlinf.cli import build_parser
from rlinf.core.files import write_text_atomic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True, help="where the JSON artifact goes")
    parser.add_argument("--out", type=Path, default=Path("runs/validate_artifact"), help="validate's --out")
    args, validate_args = parser.parse_known_args(argv)
    started = suite.begin("python benchmarks/validate_artifact.py", argv)
    command = ["validate", *validate_args, "--out", str(args.out), "--no-progress"]
    validate = build_parser().parse_args(command)
    try:  # not through rlinf's main, which prints one line: a failed benchmark shows the worker's traceback
        validate.handler(validate)
    except WorkerError as error:
        print(f"{error}\n{error.remote_traceback}", file=sys.stderr)
        return 1
    report = json.loads((args.out / "validate.json").read_text())
    # The profile the predictions came from ships beside the artifact (its provenance says which probe plan
    # measured which samples, so the out-of-sample predictions can be replayed).
    trace = args.artifact.with_name(f"{args.artifact.stem}_trace.json")
    write_text_atomic(trace, json.dumps(json.loads(Path(report["trace"]).read_text()), separators=(",", ":")))
    report["trace"] = str(trace)
    suite.write_artifact(args.artifact, {"rlinf_command": "rlinf " + " ".join(command), **report}, started)
    print(f"wrote {args.artifact}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
