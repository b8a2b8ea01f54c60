"""The package's shape: no import cycles between modules or between its parts (imports inside
functions included), and the light modules stay light."""
import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "tensortune"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """The package's modules that `name` imports anywhere in its text."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    return next((c for node in sorted(graph) if node not in state and (c := visit(node))), None)


def _part(module: str) -> str:
    """tensortune.measure.runner -> tensortune.measure; a top-level module is its own part."""
    return ".".join(module.split(".")[:2])


def test_no_module_imports_itself_back():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_no_part_of_the_package_imports_another_that_imports_it_back():
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        parts = {_part(t) for t in _imports(name, path, modules)} - {_part(name), "tensortune"}
        graph.setdefault(_part(name), set()).update(parts)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


# parts that stand side by side: neither imports the other (their shared vocabulary, Result,
# Status and Label, lies at the ground, in tensortune/result.py)
SIDE_BY_SIDE = [("tensortune.search", "tensortune.measure"), ("tensortune.space", "tensortune.measure")]


def test_search_space_and_measure_stand_side_by_side():
    modules = _modules()
    arrows = {(_part(name), _part(t)) for name, path in modules.items() for t in _imports(name, path, modules)}
    assert not [(a, b) for a, b in SIDE_BY_SIDE if (a, b) in arrows or (b, a) in arrows]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_records_and_the_command_line_load_no_compiler():
    """Opening a database, reading results, or checking a command's names costs no TVM import
    (6 s on a slow machine)."""
    code = ("import sys, tensortune.db, tensortune.cli, tensortune.points, tensortune.result; "
            "print(sorted(m for m in ('tvm', 'torch', 'xgboost') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


LONGEST_FUNCTION = 40  # lines, its signature and docstring included
LONGEST_COMMAND_MODULE = 150  # lines of a module in tensortune/cli/


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """The functions (methods and nested ones included) of `source` longer than `limit` lines."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= limit]


def test_functions_stay_short_and_command_modules_small():
    assert _long_functions("def f():\n" + "    pass\n" * LONGEST_FUNCTION, LONGEST_FUNCTION) == [("f", 41)]
    long = [f"{path.relative_to(PACKAGE.parent)}:{name} {lines} lines" for path in sorted(PACKAGE.rglob("*.py"))
            for name, lines in _long_functions(path.read_text(), LONGEST_FUNCTION)]
    assert not long, long
    big = [path.name for path in (PACKAGE / "cli").glob("*.py") if len(path.read_text().splitlines()) >= LONGEST_COMMAND_MODULE]
    assert not big, big
