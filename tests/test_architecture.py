"""The layers of ``lens`` and ``index`` import downward only.

The declared order, bottom to top. A module may import modules of its own layer and of the layers below it;
importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``, so what those import at module level counts
too. Lazy imports inside functions count like any other: they are dependencies all the same.

    0 base        lens.atomic (atomic writes, JSON), lens.extras (optional dependencies)
    1 maths       lens.pooling, lens.train.losses, lens.metrics, lens.clustering, index.vectors, index.fusion
    2 formats     lens.config, lens.corpus (the one reader per file format, the document-text rule), lens.trec,
                  lens.instructions, lens.casing (truecasing, its table's reader), lens.inputs (tokenisation, masks)
    3 models and  lens.attention, lens.layers, lens.backbone, lens.model, lens.model_dir, lens.encoder,
      stores      lens.paper_models, lens.vocab, lens.dense, lens.bm25, index (factory, metadata, manifest, store)
    4 training,   lens.hybrid, lens.indexing, lens.encode_job, lens.search, lens.serve, lens.updating,
      search,     lens.train.*, lens.eval.*
      evaluation
    5 interface   lens.cli, lens.cli_*, lens.__main__, lens (the package's lazy facade), lens.testing (the tests' and the
                  benchmarks' tiny models, corpora and fault programs); benchmarks/ scripts sit above all

Also: no module of ``lens`` or ``index`` imports the benchmark scripts, and ``index`` imports only public
(non-underscore) modules of ``lens``. Every module must be placed in a layer here. And no two modules import each
other, directly or through others (``import_cycles``): within a layer too, the imports go one way. Lazy imports
inside functions count here as well (a circle half made of lazy imports is still a circle: ``index.store`` loading
``index.shards`` inside ``HybridIndex.load`` while ``index.shards`` imports ``index.store`` was one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: dict[str, int] = {
    "lens.atomic": 0, "lens.extras": 0, "lens.cmdline": 0, "lens.host": 0,
    "lens.atomic.errors": 0, "lens.atomic.lock": 0, "lens.atomic.recovery": 0, "lens.atomic.reads": 0,
    "lens.atomic.writes": 0,
    "lens.pooling": 1, "lens.train.losses": 1, "lens.metrics": 1, "lens.clustering": 1,
    "index.vectors": 1, "index.fusion": 1, "index.bm25_fusion": 1,
    "lens.config": 2, "lens.corpus": 2, "lens.instructions": 2, "lens.inputs": 2, "lens.ateb": 2, "lens.export": 2,
    "lens.chunks": 2, "lens.trec": 2, "lens.variants": 2, "lens.casing": 2, "lens.adapters": 2,
    "lens.attention": 3, "lens.layers": 3, "lens.backbone": 3, "lens.model": 3, "lens.model_dir": 3,
    "lens.encoder": 3, "lens.fixed_shape": 3, "lens.paper_models": 3, "lens.vocab": 3, "lens.dense": 3, "lens.peers": 3, "lens.bm25": 3, "lens.quantize": 3,
    "index": 3, "index.factory": 3, "index.metadata": 3, "index.manifest": 3, "index.store": 3,
    "index.ondisk": 3, "index.shards": 3, "index.remote": 3, "index.loading": 3, "index.bm25_part": 3, "index.df_part": 3, "index.rows": 3, "index.rescore": 3,
    "index.faiss_ops": 3, "index.targets": 3,
    "lens.sharding": 4,
    "lens.hybrid": 4, "lens.index_record": 4, "lens.indexing": 4, "lens.encode_job": 4, "lens.search": 4,
    "lens.serve": 4, "lens.updating": 4, "lens.train": 4,
    "lens.eval": 4, "lens.integrations": 4,
    "lens.cli": 5, "lens.__main__": 5, "lens.cli_data": 5, "lens.cli_index": 5, "lens.cli_train": 5, "lens": 5, "lens.testing": 5,
    "lens.cli_args": 5, "lens.cli_bench": 5, "lens.cli_encode": 5,
}
PACKAGES = ("lens", "index")


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of ``module``: its own entry, else its nearest listed parent package's (``lens.train.*``)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in layers and (n == len(parts) or name not in PACKAGES):
            return layers[name]
    return None


def imports_of(path: Path, known: set[str], module_level_only: bool = False) -> list[tuple[int, str]]:
    """(line, imported module) for the imports of ``lens``/``index``/``benchmarks`` modules in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the file's package
                pkg = _package_of(path)
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((node.lineno, full if full in known else base))
    return [(n, m) for n, m in out if m.split(".")[0] in (*PACKAGES, "benchmarks")]


def _package_of(path: Path) -> str:
    parts = []
    p = path.parent
    while (p / "__init__.py").is_file():
        parts.insert(0, p.name)
        p = p.parent
    return ".".join(parts)


def violations(root: Path, layers: dict[str, int]) -> list[str]:
    """Every import that goes up a layer, reaches the benchmarks, or reaches private ``lens`` from ``index``."""
    files = module_files(root)
    known = set(files)
    problems = [f"{m}: not placed in any layer (add it to LAYERS)" for m in files if layer_of(m, layers) is None]

    eager: dict[str, int] = {}

    def eager_layer(package: str) -> int:
        """The highest layer that importing ``package`` runs (its __init__'s module-level imports)."""
        if package not in eager:
            eager[package] = -1
            path = files.get(package)
            if path is not None and path.name == "__init__.py":
                eager[package] = max([needed(m) for _, m in imports_of(path, known, True)], default=-1)
        return eager[package]

    def needed(target: str) -> int:
        parts = target.split(".")
        parents = [eager_layer(".".join(parts[:n])) for n in range(1, len(parts))]
        return max([layer_of(target, layers) or 0, *parents])

    for module, path in files.items():
        mine = layer_of(module, layers)
        if mine is None:
            continue
        for line, target in imports_of(path, known):
            where = f"{path.relative_to(root)}:{line}"
            if target.split(".")[0] == "benchmarks":
                problems.append(f"{where}: {module} imports the benchmark scripts ({target})")
            elif module.startswith("index") and target.startswith("lens") and any(
                    p.startswith("_") for p in target.split(".")):
                problems.append(f"{where}: index imports the private {target}")
            elif target != module and needed(target) > mine:
                problems.append(f"{where}: {module} (layer {mine}) imports {target} (layer {needed(target)})")
    return problems


def test_the_tree_imports_downward_only():
    assert violations(ROOT, LAYERS) == []


def import_cycles(root: Path) -> list[str]:
    """One circle of imports (``a -> b -> a``) per group of modules of ``lens`` / ``index`` that import each other,
    through any import, module-level or inside a function."""
    files = module_files(root)
    known = set(files)
    graph = {m: sorted({t for _, t in imports_of(path, known) if t in known and t != m}) for m, path in files.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return [" -> ".join(_circle(graph, group)) for group in groups]


def _circle(graph: dict[str, list[str]], group: list[str]) -> list[str]:
    """A path from the group's first module back to itself, through the group only (breadth-first: a shortest)."""
    start, members = group[0], set(group)
    came: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in graph[v]:
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w in members and w not in came:
                came[w] = v
                queue.append(w)
    return group  # pragma: no cover - a strongly connected group always has a circle


def test_no_modules_import_each_other():
    assert import_cycles(ROOT) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


LAYERS_SMALL = {"lens": 5, "lens.pooling": 1, "lens.cli": 5, "lens.train": 4, "index": 3, "index.vectors": 1}


@pytest.mark.parametrize("files,expected", [
    ({"lens/pooling.py": "def f():\n    from lens.cli import main\n"},
     "lens/pooling.py:2: lens.pooling (layer 1) imports lens.cli (layer 5)"),
    ({"lens/train/__init__.py": "", "lens/train/data.py": "import lens.cli\n"},
     "lens/train/data.py:1: lens.train.data (layer 4) imports lens.cli (layer 5)"),
    ({"lens/pooling.py": "from index.vectors import x\n",
      "index/__init__.py": "from .store import y\n", "index/store.py": ""},
     "lens/pooling.py:1: lens.pooling (layer 1) imports index.vectors (layer 3)"),
    ({"index/vectors.py": "from lens._io import atomic_dir\n", "lens/_io.py": ""},
     "index/vectors.py:1: index imports the private lens._io"),
    ({"lens/pooling.py": "import benchmarks.beir\n"},
     "lens/pooling.py:1: lens.pooling imports the benchmark scripts (benchmarks.beir)"),
    ({"lens/newthing.py": "x = 1\n"}, "lens.newthing: not placed in any layer (add it to LAYERS)"),
])
def test_a_planted_violation_is_reported(tmp_path, files, expected):
    base = {"lens/__init__.py": "", "index/__init__.py": "", "lens/pooling.py": "", "lens/cli.py": "",
            "index/vectors.py": ""}
    root = _tree(tmp_path, {**base, **files})
    layers = dict(LAYERS_SMALL, **{"index.store": 3})
    assert expected in violations(root, layers)


@pytest.mark.parametrize("files,expected", [
    ({"index/store.py": "from .shards import ShardedIndex\n", "index/shards.py": "from .store import HybridIndex\n"},
     ["index.shards -> index.store -> index.shards"]),
    ({"index/store.py": "def load():\n    from index.shards import ShardedIndex\n",  # a lazy import closes it
      "index/shards.py": "from index.store import HybridIndex\n"},
     ["index.shards -> index.store -> index.shards"]),
    ({"lens/a.py": "import lens.b\n", "lens/b.py": "from lens import c\n", "lens/c.py": "from lens.a import x\n"},
     ["lens.a -> lens.b -> lens.c -> lens.a"]),
    ({"index/store.py": "", "index/shards.py": "from .store import HybridIndex\n",
      "index/loading.py": "from .shards import S\nfrom .store import H\n"}, []),
])
def test_a_planted_import_cycle_is_reported(tmp_path, files, expected):
    root = _tree(tmp_path, {"lens/__init__.py": "", "index/__init__.py": "", **files})
    assert import_cycles(root) == expected


def test_a_clean_small_tree_passes(tmp_path):
    root = _tree(tmp_path, {"lens/__init__.py": "", "index/__init__.py": "", "lens/pooling.py": "",
                            "lens/cli.py": "from lens.pooling import f\nimport index.vectors\n",
                            "index/vectors.py": ""})
    assert violations(root, LAYERS_SMALL) == []
