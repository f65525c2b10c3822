"""Figures `structure_figures`: the shape of the product code of one or more git revisions (issue 34 item 5's
before/after figures), read from each revision's own files with the AST; nothing of it is imported but its
stage registry.

Per revision (``git archive`` of the product folders into a temporary directory):

- literals in the readers (analyzers/, report/, tui/, tracer/storage/): string constants (docstrings left
  out) equal to a stage id, or to a declared value name, of that revision's own registry
  (``tracer/registry/stages.py``: ``STAGES`` ids; ``DECLARED`` names), and the value types restated beside a
  value (``(name, "int")`` pairs and ``attr(name, "int")``, the rule of tests/tracer/test_reader_names.py);
- .py files per folder (analyzers/, adapters/, tracer/ and each of their sub-folders, the file directly in it);
- functions (def and async def, nested ones too, from ``def`` to their last line) over 80 lines, per folder;
- the import floors of adapters/: a module's floor is one above the highest floor of the adapters/ modules it
  imports (any level: module top or inside a function); modules of one import circle share a floor; the
  count is the highest floor.

    python benchmarks/structure_figures.py [REV ...] [--name NAME]     (default: 8c4a079 HEAD)

Writes benchmarks/results/NAME.json (default structure_figures).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

_ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("llmtrace", "tracer", "adapters", "backend", "analyzers", "tui", "report")
READERS = ("analyzers", "report", "tui", "tracer/storage")
VALUE_TYPES = frozenset({"str", "int", "float", "bool", "str[]", "int[]", "float[]"})
LONG = 80

# The registry of a tree: its stage ids and declared value names. argv: the package root.
_REGISTRY = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from llmtrace.tracer.registry import stages as S
print(json.dumps({"stages": sorted(s.id for s in S.STAGES), "values": sorted(S.DECLARED)}))
"""


def extract(rev: str, tmp: Path) -> tuple[Path, Path]:
    """``rev``'s product folders under tmp/tree and a package root tmp/pkg whose ``llmtrace`` maps them."""
    tree, pkg = tmp / "tree", tmp / "pkg" / "llmtrace"
    archive = tmp / "rev.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev, *PRODUCT], cwd=_ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    pkg.mkdir(parents=True)
    for f in (tree / "llmtrace").glob("*.py"):
        (pkg / f.name).symlink_to(f)
    for folder in PRODUCT[1:]:
        (pkg / folder).symlink_to(tree / folder, target_is_directory=True)
    return tree, tmp / "pkg"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _names_a_value(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) or isinstance(node, ast.Name) and node.id.isupper():
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.startswith(("llmtrace.", "gen_ai."))


def literals(source: str, stages: set[str], values: set[str]) -> tuple[int, int, int]:
    """(stage-id literals, value-name literals, restated types) in ``source``."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    stage_n = value_n = typed = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            stage_n += node.value in stages
            value_n += node.value in values
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            name, typ = node.elts
            typed += isinstance(typ, ast.Constant) and typ.value in VALUE_TYPES and _names_a_value(name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "attr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in VALUE_TYPES:
            typed += 1
    return stage_n, value_n, typed


def long_functions(source: str) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > LONG:
                out.append((node.name, n))
    return out


def _module_of(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_floors(tree: Path, folder: str = "adapters") -> dict[str, object]:
    """The floors of ``folder``'s modules over the imports between them (see the module's docstring)."""
    mods = {_module_of(p.relative_to(tree)): p for p in sorted((tree / folder).rglob("*.py"))}
    pkg_of = {m: (m if p.name == "__init__.py" else m.rpartition(".")[0]) for m, p in mods.items()}
    edges: dict[str, set[str]] = defaultdict(set)
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg_of[m].split(".")
                    base = base[:len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = (node.module or "").removeprefix("llmtrace.")
                targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("llmtrace.") for a in node.names]
            for t in targets:
                while t and t not in mods:  # a name inside a module: its module
                    t = t.rpartition(".")[0]
                if t and t != m and not (m.startswith(t + ".") and mods[t].name == "__init__.py"):
                    edges[m].add(t)
    # strongly connected components (Tarjan), then floors over the condensation
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comp: dict[str, int] = {}
    comps: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp[w] = len(comps)
                members.append(w)
                if w == v:
                    break
            comps.append(members)

    for v in mods:
        if v not in index:
            visit(v)
    floor: dict[int, int] = {}

    def floor_of(c: int) -> int:
        if c not in floor:
            below = {comp[w] for v in comps[c] for w in edges[v]} - {c}
            floor[c] = 1 + max((floor_of(d) for d in below), default=0)
        return floor[c]

    circles = [sorted(c) for c in comps if len(c) > 1]
    return {"modules": len(mods), "floors": max((floor_of(c) for c in range(len(comps))), default=0),
            "import_circles": circles}


def figures(rev: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as d:
        tree, pkg = extract(rev, Path(d))
        reg = json.loads(subprocess.run([sys.executable, "-c", _REGISTRY, str(pkg)], capture_output=True, text=True,
                                        check=True, cwd=d).stdout)
        stages, values = set(reg["stages"]), set(reg["values"])
        lit: dict[str, list[int]] = {}
        for folder in READERS:
            sums = [0, 0, 0]
            for p in sorted((tree / folder).rglob("*.py")):
                for i, n in enumerate(literals(p.read_text(encoding="utf-8"), stages, values)):
                    sums[i] += n
            lit[folder] = sums
        files: dict[str, int] = {}
        for folder in ("analyzers", "adapters", "tracer"):
            per = Counter(str(p.parent.relative_to(tree)) for p in (tree / folder).rglob("*.py"))
            files[f"{folder}/ (all)"] = sum(per.values())
            files.update({f"{k}/": v for k, v in sorted(per.items())})
        long: dict[str, list[str]] = {}
        for folder in PRODUCT:
            long[folder] = sorted((f"{p.relative_to(tree)}:{name} {n}" for p in sorted((tree / folder).rglob("*.py"))
                                   for name, n in long_functions(p.read_text(encoding="utf-8"))),
                                  key=lambda s: -int(s.rsplit(" ", 1)[1]))
        return {
            "commit": subprocess.run(["git", "rev-parse", "--short=12", f"{rev}^{{commit}}"], cwd=_ROOT,
                                     capture_output=True, text=True, check=True).stdout.strip(),
            "registry": {"stage_ids": len(stages), "value_names": len(values)},
            "reader_literals": {
                "stage_id_literals": sum(v[0] for v in lit.values()),
                "value_name_literals": sum(v[1] for v in lit.values()),
                "restated_types": sum(v[2] for v in lit.values()),
                "per_folder [stage ids, value names, restated types]": lit},
            "py_files_per_folder": files,
            "functions_over_80_lines": {"total": sum(len(v) for v in long.values()),
                                        "per_folder": {k: len(v) for k, v in long.items()},
                                        "list": {k: v for k, v in long.items() if v}},
            "adapters_import_floors": import_floors(tree),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", default=["8c4a079", "HEAD"],
                    help="git revisions (default: issue 34's start 8c4a079 and HEAD)")
    ap.add_argument("--name", default="structure_figures")
    args = ap.parse_args()
    save(args.name, {rev: figures(rev) for rev in args.revs})  # type: ignore[dict-item]


if __name__ == "__main__":
    main()
