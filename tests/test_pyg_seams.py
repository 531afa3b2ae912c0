"""The PyG internals ddstore relies on, each behind one function of ddstore/_pyg_seams.py
(checked against the installed PyG, by name), and the layout of ddstore/pyg: files of
at most 600 lines, the graph store's parts sharing no private name."""
import ast
import os
import re

import pytest
import torch

import ddstore.pyg  # noqa: F401 -- as in use: PyG's loaders wrapped (the workers' check)
from ddstore import _pyg_seams

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ddstore")

# ddstore/pyg files over 600 lines that issue 45 item 4 does not split (its item 4 splits
# graph_store.py; these two are named in the measurements only)
LONG_FILES = {"sampler.py", "feature_store.py"}
# the graph store's parts (issue 45 item 4)
GRAPH_STORE_PARTS = ("graph_store.py", "_graph_state.py", "_csc_build.py", "_edge_attrs.py")


def test_installed_pyg_has_every_internal_we_rely_on():
    problems = _pyg_seams.check()
    assert problems == [], "\n".join(problems)


def test_check_names_a_batch_table_pyg_stopped_writing(monkeypatch):
    from torch_geometric.data import Batch
    made = Batch.from_data_list.__func__

    def without_slices(cls, data_list, *args, **kwargs):  # a release renaming the table
        out = made(cls, data_list, *args, **kwargs)
        slices = out._slice_dict
        del out._slice_dict
        out._slices = slices
        return out
    monkeypatch.setattr(Batch, "from_data_list", classmethod(without_slices))
    problems = _pyg_seams.check()
    assert len(problems) == 1, problems
    assert "Batch._slice_dict" in problems[0] and "ddstore.graphs.layout" in problems[0]


def test_check_names_a_batch_table_pyg_stopped_reading(monkeypatch):
    from torch_geometric.data import Batch

    def num_graphs(self):  # a release keeping the count elsewhere
        return self._store["_count"]
    monkeypatch.setattr(Batch, "num_graphs", property(num_graphs))
    problems = _pyg_seams.check()
    assert len(problems) == 1, problems
    assert "Batch._num_graphs" in problems[0] and "no longer gives back" in problems[0]
    assert "KeyError" in problems[0]


def test_new_data_batch_is_pygs_batch_and_check_names_a_class_made_anew(monkeypatch):
    """new_data_batch: the class Batch(_base_cls=Data) returns, empty, made without the
    metaclass's signature inspection; a PyG release that made that class anew on each
    call (the kept one no longer its class) is named by check()."""
    from torch_geometric.data import Batch, Data
    made, plain = _pyg_seams.new_data_batch(), Batch(_base_cls=Data)
    assert type(made) is type(plain) and list(made.keys()) == [] and made.num_nodes is None
    other = type(type(plain))("DataBatch", (Batch, Data), {})  # another call's making
    monkeypatch.setattr(_pyg_seams, "_BATCH_CLASS", [other])
    problems = _pyg_seams.check()
    assert len(problems) == 1, problems
    assert "Batch(_base_cls=Data)" in problems[0] and "new_data_batch" in problems[0]


@pytest.mark.parametrize("name, attr", [("NodeLoader", "node_sampler"),
                                        ("LinkLoader", "link_sampler")])
def test_check_names_where_a_loader_keeps_its_sampler(monkeypatch, name, attr):
    from torch_geometric import loader
    cls = getattr(loader, name)
    init = cls.__init__

    def elsewhere(self, *args, **kwargs):  # a release renaming the loader's attribute
        init(self, *args, **kwargs)
        self.__dict__["sampler_"] = self.__dict__.pop(attr)
    elsewhere.ddstore_checked = True  # (init is the wrapped constructor)
    assert init.ddstore_checked
    monkeypatch.setattr(cls, "__init__", elsewhere)
    problems = _pyg_seams.check()
    assert len(problems) == 1, problems
    assert f"{name}.{attr}" in problems[0] and "ddstore.pyg.workers" in problems[0]


def test_loader_hook_runs_once_per_loader_with_its_sampler():
    from torch_geometric.data import Data
    from torch_geometric.loader import NodeLoader
    seen = []

    def hook(built, sampler):
        seen.append((built, sampler))
    _pyg_seams.after_loader_init(hook)
    _pyg_seams.after_loader_init(hook)  # given twice: added once
    try:
        probe = _pyg_seams.probe_sampler()
        built = NodeLoader(Data(num_nodes=3), probe, input_nodes=torch.arange(3))
        assert seen == [(built, probe)]
    finally:
        _pyg_seams._HOOKS.remove(hook)
    assert hook not in _pyg_seams._HOOKS


def test_only_the_seams_module_touches_those_pyg_internals():
    """No other module writes the Batch tables or rewrites a class's constructor."""
    pattern = re.compile(r"\._slice_dict\b|\._inc_dict\b|\._num_graphs\b|\.__init__\s*=[^=]")
    found = []
    for folder, _, files in os.walk(ROOT):
        for f in files:
            path = os.path.join(folder, f)
            # realpath: under scripts/sanitize.sh the package is a tree of links
            if not f.endswith(".py") or \
                    os.path.realpath(path) == os.path.realpath(_pyg_seams.__file__):
                continue
            with open(path) as fh:
                for i, line in enumerate(fh, 1):
                    if pattern.search(line):
                        found.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}")
    assert found == []


def test_pyg_files_at_most_600_lines():
    folder = os.path.join(ROOT, "pyg")
    lengths = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".py"):
            with open(os.path.join(folder, f)) as fh:
                lengths[f] = sum(1 for _ in fh)
    assert set(GRAPH_STORE_PARTS) <= set(lengths)
    long = {f: n for f, n in lengths.items() if n > 600 and f not in LONG_FILES}
    assert long == {}, f"ddstore/pyg files over 600 lines: {long}"
    with open(_pyg_seams.__file__) as fh:
        assert sum(1 for _ in fh) <= 600


def _private_reaches(path):
    """``x._name`` with ``x`` neither ``self`` nor ``cls``, and private names imported
    from another module, in the module at ``path``."""
    with open(path) as fh:
        tree = ast.parse(fh.read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                not node.attr.startswith("__"):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                out.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom):
            out += [f"line {node.lineno}: import {a.name}" for a in node.names
                    if a.name.startswith("_")]
    return out


@pytest.mark.parametrize("name", GRAPH_STORE_PARTS)
def test_graph_store_parts_touch_no_private_name_of_another(name):
    assert _private_reaches(os.path.join(ROOT, "pyg", name)) == []


def test_private_reach_check_finds_one():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write("from .x import _y\n\ndef f(state):\n    return state._stored\n")
    try:
        assert sorted(_private_reaches(f.name)) == ["line 1: import _y", "line 4: ._stored"]
    finally:
        os.unlink(f.name)


def test_graph_store_imports_from_where_it_did():
    from ddstore.pyg import EdgeAttr, GraphStore
    from ddstore.pyg import graph_store
    assert graph_store.GraphStore is GraphStore and graph_store.EdgeAttr is EdgeAttr
    assert graph_store.__all__ == ["GraphStore", "EdgeAttr"]
