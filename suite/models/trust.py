"""Which code a scenario may run: a `family: python` factory is imported only from a module the user declared.

A scenario file is data: whoever wrote it (a colleague, a CI artifact, a run folder from another machine) must
not be able to make `suite validate`, `plan` or `run` import and call whatever is importable, such as
`os:system`, `builtins:exit` or a module of an installed package.  Hugging Face asks for `trust_remote_code`;
suite asks that the factory's module be *declared as yours*, in one of three ways:

1. **your project**: the module's top-level package is a folder or file inside the scenario file's project
   (the nearest folder above the scenario holding pyproject.toml, setup.py, setup.cfg or .git; else the
   scenario's own folder), and is not installed in the Python environment (site-packages, the standard
   library) nor suite itself;
2. **the environment or the command line**: `SUITE_TRUST=mypkg,other.models` (comma-separated module names;
   a name trusts itself and the modules below it), which `--trust MODULE` of validate / plan / run adds to;
3. **an installed package that says so**: an entry point in the group `suite.models` (pyproject.toml:
   `[project.entry-points."suite.models"] mymodels = "mypkg.models"`) trusts that module and those below it.

Before any of that the name must have the form `package.module:function` (Python identifiers joined by dots;
no `/`, no `..`).  Nothing here imports the module: where a package lives is found from the import path
without running it (importlib's PathFinder).  Results read back never import a factory at all (the `stored`
context, models/own.py); a worker builds the model of a cell that was checked here when its scenario was read.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import site
import sys
import sysconfig
from importlib.machinery import PathFinder
from pathlib import Path

from suite.modules import MODULE, parse_names

TRUST_ENV = "SUITE_TRUST"
ENTRY_POINTS = "suite.models"
FACTORY = re.compile(rf"({MODULE.pattern}):([A-Za-z_][A-Za-z0-9_]*)")
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
NEVER = ("suite",)  # suite's own modules are no model factory, wherever suite is checked out
HOW = ("declare it: put the module in the scenario's project, name it in SUITE_TRUST (or --trust MODULE), or "
       f"install it with a \"{ENTRY_POINTS}\" entry point (docs/own-model.md)")


def split_factory(factory: str) -> tuple[str, str]:
    """(module, function) of "package.module:function", or ValueError saying what the form is."""
    match = FACTORY.fullmatch(factory) if isinstance(factory, str) and len(factory) <= 300 else None
    if match is None:
        raise ValueError(f"factory {str(factory)[:100]!r} is not of the form \"package.module:function\" (Python "
                         "names joined by dots, a colon, the function's name)")
    return match.group(1), match.group(3)


def declared() -> list[str]:
    """Module names declared trusted by the environment (SUITE_TRUST) and by installed entry points."""
    names = parse_names(os.environ.get(TRUST_ENV, ""), TRUST_ENV)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        module = ep.value.partition(":")[0].strip()
        if MODULE.fullmatch(module):
            names.append(module)
    return names


def find_project(start: Path) -> Path:
    """The project folder of a scenario file's folder `start` (see the module docstring)."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return start


def _environment_roots() -> list[str]:
    """Where installed code lives: the interpreter's and the environment's prefixes, the standard library,
    site-packages (the user's too); nothing found there is a project's own code."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix, site.getusersitepackages(), *site.getsitepackages()}
    return sorted(os.path.realpath(r) for r in roots if r)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _in_project(top: str, project: Path) -> bool:
    """Whether the top-level package `top` is found (not imported) inside `project`, outside the environment."""
    try:
        spec = PathFinder.find_spec(top)
    except (ImportError, ValueError, OSError):
        return False
    if spec is None:
        return False
    places = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    root, env = os.path.realpath(project), _environment_roots()
    if os.path.dirname(root) == root:  # a scenario at the file system's root has no project to speak of
        return False
    return all(p and _inside(os.path.realpath(p), root) and not any(_inside(os.path.realpath(p), e) for e in env)
               for p in places)


def _covers(name: str, module: str) -> bool:
    return module == name or module.startswith(name + ".")


def check_factory(factory: str, project: Path | None) -> tuple[str, str]:
    """(module, function) of a factory the user declared as theirs; ValueError naming it and how to declare it.

    `project`: the scenario's project folder (None: only SUITE_TRUST and entry points count)."""
    module, function = split_factory(factory)
    top = module.split(".")[0]
    trusted = declared()
    if any(_covers(name, module) for name in trusted):
        return module, function
    if top in NEVER or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise ValueError(f"factory {factory}: {top!r} is {'suite itself' if top in NEVER else 'in the standard library'}"
                         f", not a model of yours; suite imports a factory only from a module you declared ({HOW})")
    if project is not None and _in_project(top, project):
        return module, function
    where = f"not inside the scenario's project {project}" if project is not None else "not declared"
    raise ValueError(f"factory {factory}: module {module!r} is {where}; suite runs code only from modules you "
                     f"declared as yours: {HOW}")
