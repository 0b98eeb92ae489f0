"""Reading a scenario file's YAML within fixed bounds, before anything validates it.

A scenario is a few KB of hand-written YAML, but `suite validate` / `plan` / `run` must answer *any* file with a
clean `file:line:` error in bounded time and memory.  Plain `yaml.safe_load` does not: a recursive alias or a
few hundred nested brackets overflow Python's stack, a few hundred bytes of nested aliases ("billion laughs")
expand to gigabytes once something walks them, and an integer of thousands of digits trips Python's
int-string limit.  So this module composes the node graph with a SafeLoader subclass that counts as it goes
and stops at the first bound it passes, before any Python object is built:

- file size: MAX_BYTES, read with a cap so a huge (or endless) file is never read whole;
- text: UTF-8 only (the error names the line and column of the first bad byte);
- nesting depth, counted on the *expanded* document (an alias adds the height of what it points to);
- aliases: at most MAX_ALIASES, none pointing into its own anchor (a recursive structure);
- expanded nodes: at most MAX_NODES, counting each alias as the full size of what it points to, so the
  line map, construction and pydantic all see a document of bounded size;
- integers: at most MAX_INT_DIGITS characters, and any constructor ValueError (`2001-13-45` as a date,
  `!!float abc`) becomes a marked YAML error instead of a traceback.

`parse(path, inspect)` returns (inspect(root node), data) or raises ScenarioError; the line map is the
inspector, run on the composed graph before construction (which rewrites `<<` merge keys in place).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.reader import ReaderError

MAX_BYTES = 256 * 1024  # the shipped scenarios are 1-2 KB; 100x that is still a sane hand-written file
MAX_DEPTH = 32  # a scenario nests 4 levels (convergence.match, data, ray.resources_per_worker)
MAX_ALIASES = 100
MAX_NODES = 10_000  # about 0.5 s of pure-Python parsing; a 10,000-value sweep would be far past MAX_CELLS anyway
MAX_INT_DIGITS = 20  # 2**64 has 20 digits: every integer a scenario needs fits


class ScenarioError(Exception):
    """One or more problems in a scenario file, each already formatted as `file:line: field: message`."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def clip(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters: an error quotes what the user wrote, never hundreds of KB of it."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class _Bound(yaml.YAMLError):
    """A bound was passed: `line` is 1-based, `message` is the whole problem text after `file:line: `."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line, self.message = line, message


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts depth, aliases and expanded nodes while composing, and checks integers."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0  # expanded depth of the node being composed
        self._nodes = 0  # expanded nodes composed so far
        self._aliases = 0
        self._open: set[str] = set()  # anchors whose node is still being composed (an alias to one recurses)
        self._size: dict[int, int] = {}  # id(node) -> expanded node count of its subtree
        self._height: dict[int, int] = {}  # id(node) -> expanded height of its subtree

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent):
            return self._alias(event, line)
        self._depth += 1
        self._nodes += 1
        if self._depth > MAX_DEPTH:
            raise _Bound(line, f"nesting deeper than {MAX_DEPTH} levels; a scenario needs about 4: "
                               f"remove the extra brackets or indentation")
        if self._nodes > MAX_NODES:
            raise _Bound(line, f"more than {MAX_NODES:,} values (counting what aliases expand to); "
                               f"a scenario needs a few dozen: sweep fewer values or split the file")
        anchor = event.anchor if isinstance(event, NodeEvent) else None
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open.discard(anchor)
        children = self._children(node) if isinstance(event, CollectionStartEvent) else []
        self._size[id(node)] = 1 + sum(self._size.get(id(c), 1) for c in children)
        self._height[id(node)] = 1 + max((self._height.get(id(c), 1) for c in children), default=0)
        return node

    def _alias(self, event: AliasEvent, line: int) -> Any:
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            raise _Bound(line, f"more than {MAX_ALIASES} aliases (*name); write the values out instead")
        if event.anchor in self._open:
            raise _Bound(line, f"alias *{clip(event.anchor)} refers to a value that contains it (a recursive "
                               f"structure); a scenario is a tree: write the value out")
        node = super().compose_node(None, None)  # the anchored node (or PyYAML's "undefined alias" error)
        self._nodes += self._size.get(id(node), 1)
        if self._nodes > MAX_NODES:
            raise _Bound(line, f"aliases expand to more than {MAX_NODES:,} values (nested aliases multiply); "
                               f"write the values out instead")
        if self._depth + self._height.get(id(node), 1) > MAX_DEPTH:
            raise _Bound(line, f"alias *{clip(event.anchor)} nests the document deeper than {MAX_DEPTH} levels")
        return node

    @staticmethod
    def _children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return list(node.value) if isinstance(node, yaml.SequenceNode) else []

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            raise _Bound(node.start_mark.line + 1, f"integer of {len(digits)} digits; the limit is "
                                                   f"{MAX_INT_DIGITS} (every count a scenario needs fits in 64 bits)")
        return super().construct_yaml_int(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # Constructors raise plain ValueError/OverflowError on scalars that match a tag's pattern but not its
        # range (`2001-13-45` as a date, `!!float abc`); give them the node's mark like every other YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            raise ConstructorError(None, None, f"cannot read {clip(repr(node.value))} as {node.tag.rsplit(':', 1)[-1]}:"
                                               f" {clip(str(exc))}", node.start_mark) from exc


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def read_text(path: Path) -> str:
    """The file's text, refusing files over MAX_BYTES and bytes that are not UTF-8."""
    name = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)  # never more: a 10 GB file (or /dev/zero) costs 256 KB
    except OSError as exc:
        raise ScenarioError([f"{name}: cannot read scenario file: {exc.strerror}"]) from exc
    if len(raw) > MAX_BYTES:
        raise ScenarioError([f"{name}:1: scenario file is larger than {MAX_BYTES:,} bytes (a scenario is a few KB):"
                             f" sweep fewer values or split it into several files"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ScenarioError([f"{name}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); "
                             f"save the file as UTF-8"]) from exc


T = TypeVar("T")


def parse(path: Path, inspect: Callable[[yaml.Node | None], T]) -> tuple[T, Any]:
    """(inspect(root node), constructed data) of a scenario file within the bounds above, or ScenarioError."""
    return parse_text(str(path), read_text(path), inspect)


def parse_text(name: str, text: str, inspect: Callable[[yaml.Node | None], T]) -> tuple[T, Any]:
    """parse() of text already read (`name` heads the errors): a run folder's scenario copy, read bounded."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader already refuses control characters
        root = loader.get_single_node()
        seen = inspect(root)  # before constructing: merge keys (`<<: *base`) are still written as in the file
        data = loader.construct_document(root) if root is not None else None
    except _Bound as exc:
        raise ScenarioError([f"{name}:{exc.line}: {exc.message}"]) from exc
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{name}:{_line(exc, text)}: malformed YAML: {_problem(exc)}"]) from exc
    finally:
        if loader is not None:
            loader.dispose()
    return seen, data


def _line(exc: yaml.YAMLError, text: str) -> int:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return mark.line + 1
    position = getattr(exc, "position", None)  # a ReaderError (a control character) has only a position
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else 1


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, ReaderError):
        return f"character {exc.character!r} is not allowed in YAML; remove it"
    problem = getattr(exc, "problem", None) or str(exc)
    context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and cmark is not None:  # e.g. an unclosed `[` is detected lines later: name where it began
        problem += f" ({context} started on line {cmark.line + 1})"
    return clip(problem, 200)
