"""`python -m suite.testing.results_fuzz serve | cli ARGS...`: the child's two entries (child.py).

`serve` is the long-lived child a `Runner` starts (runner.py); `cli ARGS...` runs one `suite` command in a fresh,
disarmed process (`run_subprocess`, for `run --resume`)."""

from __future__ import annotations

import sys

from suite.testing.results_fuzz.child import disarmed_cli, serve

if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["cli"]:
        disarmed_cli()
    else:
        sys.exit("usage: python -m suite.testing.results_fuzz serve | cli ARGS...")
