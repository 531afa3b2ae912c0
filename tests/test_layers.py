"""The include, call and import graph of the code (issue 45, item 2): no circle, and no
arrow upward, in C as in Python.

C (csrc/): a file-level graph whose arrows are the ``#include "..."`` lines and the calls
of one .c file into a non-static function another .c file defines (found by a regex
over the sources, comments and strings removed).  Python (ddstore/): the module graph of
every ``import`` / ``from ... import`` (relative or absolute, at any depth: the imports
inside functions count too), parsed with ``ast``.

The layers, bottom first: a file may use its own layer and the ones below it, never
one above.  The same order is written in docs/development.md ("Layers"); a new file
must be placed here, or the test names it.
"""
import ast
import glob
import os
import re
from collections import defaultdict
from functools import lru_cache

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
PKG = os.path.join(ROOT, "ddstore")

# ---------------------------------------------------------------- the layers, bottom first

C_LAYERS = [
    # the declarations every file shares: the API headers, the structs, times.h
    ("headers", ["ddstore.h", "dds_*.h", "internal.h", "times.h"]),
    ("base", ["base.c"]),                    # errors, fork guard, variable lookup
    ("device copies", ["device.c"]),         # many host-to-device copies in one call
    ("message path", ["serve.c"]),           # requests and replies by message
    ("progress agent", ["progress.c"]),      # the thread that answers them
    ("transport", ["transport.c", "transport.h"]),  # local load / MPI_Get / message
    ("store", ["ddstore.c"]),                # windows, variables, the walk of a read
    ("samplers' unit and checks", ["sampling.c", "sampling.h", "tcsr.c", "dynamic.c",
                                   "subgraph.c", "checks.c", "relabel.c"]),
    ("samplers", ["neighbor.c", "temporal.c"]),
]

PY_LAYERS = [
    ("C core", ["ddstore._ddstore_cffi"]),
    ("_core", ["ddstore._version", "ddstore.errors", "ddstore._times", "ddstore._checks",
               "ddstore._core"]),
    ("store", ["ddstore._fingerprint", "ddstore._status", "ddstore._collective",
               "ddstore._readers", "ddstore._pins", "ddstore._transaction",
               "ddstore._lifecycle",
               "ddstore.memory", "ddstore.placement", "ddstore.build", "ddstore.records",
               "ddstore.checkpoint", "ddstore.store", "ddstore.prefetch",
               "ddstore.distributed", "ddstore.device",
               "ddstore"]),  # the package's __init__: re-exports errors and the store
    ("sources", ["ddstore.sources"]),
    ("graphs", ["ddstore.graphs"]),
    ("spatiotemporal", ["ddstore.spatiotemporal"]),
    ("dynamic", ["ddstore.dynamic"]),
    ("temporal", ["ddstore.temporal"]),
    ("pyg", ["ddstore.pyg"]),
    ("bench/CLI", ["ddstore.bench", "ddstore.__main__", "ddstore.testing"]),
]


def c_layer(name):
    """Index in C_LAYERS of a file of csrc/ (None: not placed)."""
    for i, (_, pats) in enumerate(C_LAYERS):
        if any(re.fullmatch(re.escape(p).replace(r"\*", ".*"), name) for p in pats):
            return i
    return None


def py_layer(module):
    """Index in PY_LAYERS of a module: its own entry, else its nearest package's."""
    best, depth = None, -1
    for i, (_, names) in enumerate(PY_LAYERS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and n.count(".") > depth:
                best, depth = i, n.count(".")
    return best


# ---------------------------------------------------------------- graphs

def cycles(edges):
    """The strongly connected components of more than one node, and the nodes with an
    arrow to themselves (Tarjan, iterative)."""
    nodes = sorted(set(edges) | {b for bs in edges.values() for b in bs})
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in edges.get(v, ()):
                        out.append(sorted(comp))
    return out


def _strip_c(src):
    """C source without comments and string/char literals (line count kept)."""
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "''", src)


_C_DEF = re.compile(r"^(?!#)([A-Za-z_][\w \t*]*?)\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*"
                    r"(?:__attribute__\s*\(\(.*?\)\)\s*)?\{", re.M)


def c_graph(csrc=CSRC):
    """{file: {file it includes or calls into}} and {(a, b): the functions a calls in b}."""
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(csrc, "*.[ch]")))
    texts = {f: open(os.path.join(csrc, f)).read() for f in files}
    stripped = {f: _strip_c(t) for f, t in texts.items()}
    # macros that stand for `static ...` (e.g. PER_WIDTH) make a definition file-local
    static_words = {"static"}
    for s in stripped.values():
        static_words |= set(re.findall(r"^#\s*define\s+(\w+)\s+static\b", s, re.M))
    defined = {}
    for f in files:
        if not f.endswith(".c"):
            continue
        for m in _C_DEF.finditer(stripped[f]):
            words = m.group(1).split()
            if words and words[0] in static_words:
                continue
            defined.setdefault(m.group(2), f)
    edges, why = defaultdict(set), defaultdict(set)
    for f in files:
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', texts[f], re.M):
            edges[f].add(inc)
            why[(f, inc)].add("#include")
        if f.endswith(".c"):
            for name in re.findall(r"\b([A-Za-z_]\w*)\s*\(", stripped[f]):
                g = defined.get(name)
                if g and g != f:
                    edges[f].add(g)
                    why[(f, g)].add(name + "()")
    for f in files:
        edges.setdefault(f, set())
    return edges, why, defined


def _py_modules(pkg=PKG):
    """{module name: path} of every .py under ddstore/, and the compiled modules."""
    mods = {}
    top = os.path.dirname(pkg)
    for d, _, fs in os.walk(pkg):
        for f in fs:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, top)
            if f.endswith(".py"):
                name = rel[:-3].replace(os.sep, ".")
                mods[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
            elif f.endswith(".so") or f.endswith(".pyd"):
                mods[rel.split(".")[0].replace(os.sep, ".")] = p
    # the C core's module whether or not it is built in this tree (a fresh clone's
    # imports of it were taken for imports of the package: a circle that is not there)
    mods.setdefault("ddstore._ddstore_cffi", os.path.join(pkg, "_ddstore_cffi.so"))
    return mods


@lru_cache(maxsize=None)
def py_graph(pkg=PKG):
    """{module: {ddstore module it imports}} over every import statement of ddstore/
    (cached: read it, do not change it)."""
    mods = _py_modules(pkg)

    def known(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges = defaultdict(set)
    for m, path in mods.items():
        if not path.endswith(".py"):
            edges.setdefault(m, set())
            continue
        is_pkg = path.endswith("__init__.py")
        targets = []
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Import):
                targets += [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = m.split(".") if is_pkg else m.split(".")[:-1]
                    parts = parts[:len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:  # a submodule, else a name of the module
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in mods else known(base))
        edges[m] |= {t for t in targets if t and t != m and t.split(".")[0] == "ddstore"}
    return edges


# ---------------------------------------------------------------- the tests

def test_cycle_finder_finds_planted_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]


def test_c_graph_sees_includes_and_calls(tmp_path):
    """The C parser finds an include, a call into another file, and ignores a static
    function, a call in a comment and one in a string."""
    (tmp_path / "x.h").write_text("int x_api(void);\n")
    (tmp_path / "a.c").write_text('#include "x.h"\nint a_api(int v)\n{\n    return v;\n}\n'
                                  "static int hidden(void) { return 0; }\n")
    (tmp_path / "b.c").write_text('#include "x.h"\nint x_api(void)\n{\n'
                                  '    /* hidden() */ const char *s = "hidden()";\n'
                                  "    return a_api(1) + (s != 0);\n}\n")
    edges, why, defined = c_graph(str(tmp_path))
    assert defined == {"a_api": "a.c", "x_api": "b.c"}
    assert edges["b.c"] == {"x.h", "a.c"} and why[("b.c", "a.c")] == {"a_api()"}
    assert edges["a.c"] == {"x.h"}


def test_c_has_no_circle():
    edges, why, _ = c_graph()
    found = cycles(edges)
    detail = [[f"{a} -> {b}: {sorted(why[(a, b)])}" for a in c for b in c
               if b in edges[a]] for c in found]
    assert found == [], f"circles in csrc/: {detail}"
    # the layers this test guards are there: the store reaches the message path only
    # through the transport, which is the one file deciding the route
    assert "transport.c" in edges["ddstore.c"]
    assert {"serve.c", "progress.c"} <= edges["transport.c"]
    assert "serve.c" not in edges["ddstore.c"]


def test_c_calls_and_includes_go_down_the_layers():
    edges, why, _ = c_graph()
    unplaced = sorted(f for f in edges if c_layer(f) is None)
    assert unplaced == [], f"files of csrc/ not placed in C_LAYERS: {unplaced}"
    up = [f"{a} ({C_LAYERS[c_layer(a)][0]}) -> {b} ({C_LAYERS[c_layer(b)][0]}): "
          f"{sorted(why[(a, b)])}"
          for a in sorted(edges) for b in sorted(edges[a]) if c_layer(b) > c_layer(a)]
    assert up == [], f"arrows upward in csrc/: {up}"


def test_python_graph_sees_imports(tmp_path):
    pkg = tmp_path / "ddstore"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .low import x\n")
    (pkg / "low.py").write_text("x = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text(
        "import os\nfrom .. import low\nfrom ddstore import x\n"
        "def f():\n    from ..sub import other\n")
    (pkg / "sub" / "other.py").write_text("import ddstore.sub.mod\n")
    edges = py_graph(str(pkg))
    assert edges["ddstore.sub.mod"] == {"ddstore.low", "ddstore", "ddstore.sub.other"}
    assert edges["ddstore"] == {"ddstore.low"}
    assert cycles(edges) == [["ddstore.sub.mod", "ddstore.sub.other"]]


def test_python_has_no_circle():
    edges = py_graph()
    assert "ddstore._lifecycle" in edges["ddstore.store"]  # the parse found the imports
    assert cycles(edges) == [], f"import circles in ddstore/: {cycles(edges)}"


def test_python_imports_go_down_the_layers():
    edges = py_graph()
    unplaced = sorted(m for m in edges if py_layer(m) is None)
    assert unplaced == [], f"modules of ddstore/ not placed in PY_LAYERS: {unplaced}"
    up = [f"{a} ({PY_LAYERS[py_layer(a)][0]}) -> {b} ({PY_LAYERS[py_layer(b)][0]})"
          for a in sorted(edges) for b in sorted(edges[a]) if py_layer(b) > py_layer(a)]
    assert up == [], f"imports upward in ddstore/: {up}"


@pytest.mark.parametrize("doc", ["docs/development.md"])
def test_layers_written_down(doc):
    """docs/development.md lists the layers in this test's order."""
    text = open(os.path.join(ROOT, doc)).read()
    text = text[text.index("\n## Layers\n"):]
    text = text[:text.find("\n## ", 1) if "\n## " in text[1:] else len(text)]
    at = [text.find(f"`{name}`") for name, _ in PY_LAYERS]
    assert -1 not in at and at == sorted(at), (doc, dict(zip([n for n, _ in PY_LAYERS], at)))


def test_the_store_class_stays_within_650_lines():
    """Issue 45 item 1: ``DDStore`` is a thin front over its components (variables,
    records, annotations, checkpoints, the transaction journal); its file stays within
    650 lines, so that new behaviour goes into a component, not back into the store."""
    with open(os.path.join(PKG, "store.py")) as f:
        n = sum(1 for _ in f)
    assert n <= 650, f"ddstore/store.py has {n} lines (at most 650: issue 45 item 1)"


def test_the_package_lines_stay_within_100_columns():
    """The package's lines (code, comments and docstrings: the API reference and ``help()``
    show the docstrings as written) stay within 100 columns, as docs/development.md says."""
    files = sorted(glob.glob(os.path.join(PKG, "**", "*.py"), recursive=True))
    files.append(os.path.join(ROOT, "pyddstore.py"))
    long_lines = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            long_lines += [f"{os.path.relpath(path, ROOT)}:{i} ({len(line)} columns)"
                           for i, line in enumerate(f.read().split("\n"), 1)
                           if len(line) > 100]
    assert not long_lines, "lines over 100 columns: " + ", ".join(long_lines)
