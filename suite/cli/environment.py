"""suite's environment variables, checked once, before any command does work.

SUITE_FAULT (planted faults, tests only), SUITE_PLUGINS (strategy plugin modules) and SUITE_TRUST (modules a
scenario's python factory may come from) are read deep inside the worker, the registry and validation.  A
malformed value met there fails every cell one by one, or is silently ignored; checked here, it is one
`error:` line naming the variable and the bad entry, exit 2, before a scenario is read or a cell launched.
`--trust MODULE` (validate, plan, run) adds to SUITE_TRUST for this process and the ones it starts.
"""

from __future__ import annotations

import os

from suite.models.trust import TRUST_ENV
from suite.modules import parse_names
from suite.strategies.registry import PLUGINS_ENV
from suite.worker import faults


def problems() -> list[str]:
    """One line per malformed variable (empty when every one is well-formed or unset)."""
    found = []
    real_worker = os.environ.get("SUITE_WORKER_MODULE", "suite.worker") == "suite.worker"
    checks = ((faults.ENV, lambda v: faults.check(v, real_worker)), (PLUGINS_ENV, lambda v: parse_names(v, PLUGINS_ENV)),
              (TRUST_ENV, lambda v: parse_names(v, TRUST_ENV)))
    for name, check in checks:
        value = os.environ.get(name)
        if value:
            try:
                check(value)
            except ValueError as exc:
                found.append(str(exc) if name in str(exc) else f"{name}: {exc}")
    return found


def trust(modules: list[str]) -> None:
    """Add `modules` (from --trust) to SUITE_TRUST; ValueError naming a malformed one."""
    names = [n for m in modules for n in parse_names(m, "--trust")]
    if names:
        current = os.environ.get(TRUST_ENV, "")
        os.environ[TRUST_ENV] = ",".join(filter(None, [current, *names]))
