"""The surfaces one vLLM source tree declares, read with :mod:`ast` (vLLM is never imported).

What is read, and from where (the forms vLLM 0.10 to 0.34 use):

- ``route``: FastAPI/APIRouter decorators (``@router.get("/health")``,
  ``api_route(..., methods=...)``), ``add_api_route``/``add_route`` calls and
  Starlette ``Mount``/``Route``; keyed ``METHOD /path``.
- ``middleware``: classes named ``*Middleware`` under ``vllm/entrypoints``, with
  the paths their module names (a middleware's exempt paths are its behaviour).
- ``body``: error texts a client is answered with: the sentence-like string
  literals of middleware modules and of the exception modules, and those of any
  ``vllm/entrypoints`` or ``vllm/v1/engine`` function that names a 503.
- ``metric``: ``vllm:`` families built by prometheus-client's constructors (or
  vLLM's ``_counter_cls``-style aliases), with their type and label names.
- ``title``: ``set_process_title`` calls, a name built up in its function
  rendered as ``Worker[_DP{}][_TP{}]``.
- ``flag``: ``add_argument("--x")`` strings and ``*FrontendArgs`` fields;
  ``field``: the fields of ``vllm/config`` classes with their defaults (the
  keys of JSON flags such as ``--watchdog-config``).

Hostile or odd source is skipped file by file (a file that does not parse is
counted, never fatal). Extraction is pure: (path, text) pairs in, an
:class:`Surfaces` out, so it is tested on small synthetic trees.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

KINDS = ("route", "middleware", "body", "metric", "title", "flag", "field")
_HTTP_METHODS = frozenset({"get", "post", "put", "delete", "patch", "head", "options"})
_METRIC_TYPES = ("counter", "gauge", "histogram", "summary", "info", "enum")
_LOG_CALLS = frozenset(
    {"debug", "info", "warning", "error", "exception", "critical", "warn"}
    | {"debug_once", "info_once", "warning_once", "log"}
)
_BODY_FILES = ("vllm/exceptions.py", "vllm/v1/engine/exceptions.py")
_BODY_TREES = ("vllm/entrypoints/", "vllm/v1/engine/")
_503 = re.compile(
    r"\b503\b|SERVICE_UNAVAILABLE|Service ?Unavailable|ServiceUnavailable|retryable=True"
)
_PROSE_KEYWORDS = frozenset({"documentation", "help", "description", "doc", "msg_prefix"})
_FAMILY = re.compile(r"vllm:[a-z0-9_]+")
_SENTENCE = re.compile(r"^[A-Z'\"][^\n]{14,}[ ][^\n]*$")


@dataclass(frozen=True, slots=True)
class Item:
    """One declared surface: ``key`` names it in every release, ``detail`` may change."""

    kind: str
    key: str
    detail: str
    where: str


@dataclass(slots=True)
class Surfaces:
    """Every surface of one source tree, by kind then key (first declaration wins)."""

    items: dict[str, dict[str, Item]] = field(default_factory=lambda: {k: {} for k in KINDS})
    files: int = 0
    unparsed: list[str] = field(default_factory=list)
    # ``vllm:`` names seen outside a constructor (class constants, spec tables).
    loose: dict[str, str] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        kept = self.items[item.kind].get(item.key)
        if kept is None:
            self.items[item.kind][item.key] = item
        elif item.kind == "route":
            # Another handler on the same path and method (0.33's second /v1/embeddings).
            count = kept.where.count(", ") + 2
            where = f"{kept.where}, {item.where}" if count <= 3 else kept.where
            self.items["route"][item.key] = Item("route", item.key, f"{count} handlers", where)

    def keys(self, kind: str) -> frozenset[str]:
        return frozenset(self.items[kind])


def render(node: ast.AST | None, scope: dict[str, ast.AST] | None = None) -> str | None:
    """A string expression as text, an f-string's fields as ``{}`` (None: not a string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            text = render(value, scope) if isinstance(value, ast.Constant) else None
            parts.append(text if text is not None else "{}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = render(node.left, scope), render(node.right, scope)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and scope and node.id in scope:
        return render(scope[node.id], None)
    return None


def strings(node: ast.AST | None, scope: dict[str, ast.AST] | None = None) -> list[str] | None:
    """A list/tuple of string literals (``labelnames + ["source"]`` included); None if unknown."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        out = [render(e) for e in node.elts]
        return None if any(s is None for s in out) else [s for s in out if s is not None]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = strings(node.left, scope), strings(node.right, scope)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and scope and node.id in scope:
        return strings(scope[node.id], None)
    if isinstance(node, ast.Call) and _name(node.func) in {"list", "tuple", "frozenset", "set"}:
        return strings(node.args[0], scope) if node.args else []
    return None


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _arg(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _assignments(body: Iterable[ast.stmt]) -> dict[str, ast.AST]:
    """Names assigned in a block (the last value wins), not descending into nested defs."""
    scope: dict[str, ast.AST] = {}
    stack = list(body)
    while stack:
        stmt = stack.pop(0)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                scope[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            scope[stmt.target.id] = stmt.value
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt) and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                stack.append(child)
    return scope


def _built_name(var: str, func: ast.AST, scope: dict[str, ast.AST]) -> list[str]:
    """Each title a name variable takes in its function: ``Worker[_DP{}]``-style when built up."""
    bases: list[str] = []
    suffixes: list[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == var for t in node.targets
        ):
            text = render(node.value, scope)
            if text is not None:
                bases.append(text)
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == var
        ):
            text = render(node.value, scope)
            suffixes.append(f"[{text if text is not None else '{}'}]")
    if not bases:
        return ["{}"]
    return [base + "".join(suffixes) for base in bases]


class _FileReader:
    """One module's surfaces into ``out``."""

    def __init__(self, path: str, tree: ast.Module, out: Surfaces) -> None:
        self.path, self.tree, self.out = path, tree, out
        self.module_scope = _assignments(tree.body)
        self.owners: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] | None = None

    def where(self, node: ast.AST) -> str:
        return f"{self.path}:{getattr(node, 'lineno', 0)}"

    def read(self) -> None:
        is_middleware = "middleware" in self.path.rsplit("/", 1)[-1] or any(
            isinstance(n, ast.ClassDef) and n.name.endswith("Middleware") for n in self.tree.body
        )
        body_module = self.path in _BODY_FILES or (
            is_middleware and self.path.startswith("vllm/entrypoints/")
        )
        if body_module:
            self.bodies(self.tree)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.decorated_routes(node)
                if (
                    not body_module
                    and self.path.startswith(_BODY_TREES)
                    and _503.search(ast.unparse(node))
                ):
                    self.bodies(node)
                self.titles(node)
            elif isinstance(node, ast.ClassDef):
                self.classes(node)
            elif isinstance(node, ast.Call):
                self.call(node)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _FAMILY.fullmatch(node.value)
            ):
                self.out.loose.setdefault(node.value, self.where(node))

    def decorated_routes(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in func.decorator_list:
            if not isinstance(deco, ast.Call) or not isinstance(deco.func, ast.Attribute):
                continue
            verb = deco.func.attr
            path = render(_arg(deco, 0, "path"))
            if path is None or not path.startswith("/"):
                continue
            if verb in _HTTP_METHODS:
                methods = [verb.upper()]
            elif verb in {"api_route", "route"}:
                methods = strings(_arg(deco, 99, "methods")) or ["GET"]
            else:
                continue
            for method in methods:
                self.route(method.upper(), path, deco)

    def route(self, method: str, path: str, node: ast.AST) -> None:
        self.out.add(Item("route", f"{method} {path}", "", self.where(node)))

    def call(self, call: ast.Call) -> None:
        name = _name(call.func)
        if name in {"Mount", "Route", "add_api_route", "add_route"}:
            path = render(_arg(call, 0, "path"))
            if path is not None and path.startswith("/"):
                if name == "Mount":
                    methods = ["ANY"]
                else:
                    methods = strings(_arg(call, 99, "methods")) or ["GET"]
                for method in methods:
                    self.route(method.upper(), path, call)
        elif name == "add_argument":
            self.flags(call)
        else:
            self.metric(call, name)

    def flags(self, call: ast.Call) -> None:
        names = [render(a) for a in call.args]
        flags = [n for n in names if n is not None and n.startswith("--")]
        default = _arg(call, 99, "default")
        detail = f"default {ast.unparse(default)}" if isinstance(default, ast.Constant) else ""
        for flag in flags:
            self.out.add(Item("flag", flag, detail, self.where(call)))

    def metric(self, call: ast.Call, name: str) -> None:
        lowered = name.lower().strip("_")
        kind = next((t for t in _METRIC_TYPES if lowered.startswith(t)), None)
        if kind is None or not (lowered == kind or lowered.endswith("_cls")):
            return
        family = render(_arg(call, 0, "name"), self.module_scope)
        if family is None or not family.startswith("vllm:"):
            return
        labels_node = _arg(call, 2, "labelnames")
        scope = dict(self.module_scope)
        scope.update(self.enclosing_scope(call))
        labels = [] if labels_node is None else strings(labels_node, scope)
        shown = "dynamic" if labels is None else ",".join(labels)
        self.out.add(Item("metric", family, f"{kind} [{shown}]", self.where(call)))

    def enclosing_scope(self, target: ast.AST) -> dict[str, ast.AST]:
        if self.owners is None:
            self.owners = {}
            for node in ast.walk(self.tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    for child in ast.walk(node):
                        self.owners[id(child)] = node  # the innermost def is walked last
        owner = self.owners.get(id(target))
        return {} if owner is None else _assignments(owner.body)

    def titles(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope = dict(self.module_scope)
        scope.update(_assignments(func.body))
        for node in ast.walk(func):
            if not isinstance(node, ast.Call) or _name(node.func) != "set_process_title":
                continue
            name_node = _arg(node, 0, "name")
            if isinstance(name_node, ast.Name):
                names = _built_name(name_node.id, func, self.module_scope)
            else:
                names = [render(name_node, scope) or "{}"]
            suffix_node = _arg(node, 1, "suffix")
            suffix = "" if suffix_node is None else "_" + (render(suffix_node, scope) or "{}")
            for title in names:
                self.out.add(Item("title", title + suffix, "", self.where(node)))

    def classes(self, cls: ast.ClassDef) -> None:
        if cls.name.endswith("Middleware") and self.path.startswith("vllm/entrypoints/"):
            paths = sorted(
                {
                    n.value
                    for n in ast.walk(self.tree)
                    if isinstance(n, ast.Constant)
                    and isinstance(n.value, str)
                    and re.fullmatch(r"/[a-z0-9_/]*", n.value)
                }
            )
            detail = f"paths {', '.join(paths)}" if paths else ""
            self.out.add(Item("middleware", cls.name, detail, self.where(cls)))
        frontend = cls.name.endswith("FrontendArgs")
        if not frontend and not (self.path.startswith("vllm/config/") and cls.decorator_list):
            return
        for stmt in cls.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            attr = stmt.target.id
            if attr.startswith("_") or "ClassVar" in ast.unparse(stmt.annotation):
                continue
            detail = self.default(stmt.value)
            if frontend:
                flag = "--" + attr.replace("_", "-")
                self.out.add(Item("flag", flag, detail, self.where(stmt)))
            else:
                self.out.add(Item("field", f"{cls.name}.{attr}", detail, self.where(stmt)))

    def default(self, value: ast.AST | None) -> str:
        if isinstance(value, ast.Call) and _name(value.func) == "Field":
            value = _arg(value, 0, "default")
        if isinstance(value, ast.Name) and value.id in self.module_scope:
            value = self.module_scope[value.id]
        if isinstance(value, ast.Constant):
            return f"default {value.value!r}"
        return ""

    def bodies(self, root: ast.AST) -> None:
        skip: set[int] = set()
        for node in ast.walk(root):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                skip.add(id(node.value))  # docstrings
            elif isinstance(node, ast.Call) and _name(node.func) in _LOG_CALLS:
                skip.update(id(n) for n in ast.walk(node))
            elif isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg in _PROSE_KEYWORDS:
                        skip.update(id(n) for n in ast.walk(kw.value))
            elif isinstance(node, ast.JoinedStr):
                skip.update(id(n) for n in node.values)
        for node in ast.walk(root):
            if id(node) in skip or not isinstance(node, ast.Constant | ast.JoinedStr):
                continue
            if isinstance(node, ast.Constant) and not isinstance(node.value, str):
                continue
            text = render(node)
            if text is not None and _SENTENCE.match(text) and not text.startswith("{}"):
                self.out.add(Item("body", " ".join(text.split()), "", self.where(node)))


def extract(sources: Iterable[tuple[str, str]]) -> Surfaces:
    """The surfaces of ``(path inside the wheel, source text)`` pairs."""
    out = Surfaces()
    for path, text in sources:
        out.files += 1
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError, RecursionError):
            out.unparsed.append(path)
            continue
        _FileReader(path, tree, out).read()
    for name, where in out.loose.items():
        if name not in out.items["metric"]:
            out.add(Item("metric", name, "declared indirectly [?]", where))
    return out


def iter_items(surfaces: Surfaces) -> Iterator[Item]:
    for kind in KINDS:
        yield from surfaces.items[kind].values()
