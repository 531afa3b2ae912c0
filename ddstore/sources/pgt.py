"""PyTorch Geometric Temporal's JSON data sets, every layout PGT ships.

The layout is chosen by the keys of the file's top-level object (:func:`_pgt_layout`
tries the layouts of :data:`_LAYOUTS` in order; the first that matches reads the file):

- ``FX`` (chickenpox), ``X`` + ``weights`` (PedalMe), ``block`` + ``weights``
  (Windmill): a ``[T, nodes]`` matrix with ``edges`` -> :class:`Series`;
- ``edge_mapping`` (England COVID): ``edge_mapping.edge_index[t]`` /
  ``edge_mapping.edge_weight[t]`` with ``y`` ``[T, nodes]`` -> :class:`DynamicSeries`;
- per-step dicts ``"0", "1", ...`` that carry their own ``edges`` / ``weights`` plus
  ``X`` / ``y`` (Twitter tennis) -> :class:`DynamicSeries`;
- per-step dicts ``"0", "1", ...`` with ``y`` (and/or ``X``) and a top-level ``edges`` /
  ``weights`` (WikiMath) -> :class:`Series`;
- ``nodes`` (``bus_stop``, ``X`` variables, ``y``) with ``links`` (``source``,
  ``target``, ``weight``) (Montevideo bus) -> :class:`Series`.

Any other layout raises a :class:`~ddstore.errors.DDStoreValueError` that names the file
and the keys found.  The file is read whole (JSON has no block access); the series is
held in memory and read as views.
"""
import io
import json
import math
import os
import re
import warnings

import numpy as np

from ..errors import DDStoreValueError
from .._checks import as_dtype
from .base import file_share, regular_file
from .series import Series, check_series_array

__all__ = ["load_pgt_json", "DynamicSeries"]


class DynamicSeries(Series):
    """A :class:`Series` whose graph changes every step (a discrete-time dynamic graph).

    Besides the node signals ``[T, nodes, features]`` (read with :meth:`Series.read`) it
    carries ``edges`` (``T`` int64 arrays ``[2, E_t]``, row 0 source, row 1 target) and
    ``weights`` (``T`` float32 arrays ``[E_t]``, or None), ready for
    :meth:`ddstore.dynamic.DynamicGraph.from_series`; its static ``edge_index`` is empty.
    ``target_feature`` is the feature column holding the file's target ``y`` (None when
    the file has none).
    """

    def __init__(self, data, edges, weights, *, target_feature=None, node_ids=None,
                 source=None):
        super().__init__(data.shape, data.dtype, lambda a, b: data[a:b], node_ids=node_ids,
                         source=source)
        self.edges, self.weights = edges, weights
        self.target_feature = target_feature

    def __repr__(self):
        return (f"DynamicSeries(shape={self.shape}, dtype={self.dtype}, steps with edges="
                f"{len(self.edges)}, edges={sum(e.shape[1] for e in self.edges)} in all, "
                f"source={self.source!r})")


def load_pgt_json(path, dtype=np.float32):
    """Load a PyTorch Geometric Temporal JSON data set as a :class:`Series`.

    Layouts (chosen by the keys present): ``FX`` ``[T, nodes]`` with ``edges`` (chickenpox;
    unit edge weights); ``X`` ``[T, nodes]`` with ``edges`` and ``weights`` (PedalMe);
    ``block`` ``[T, nodes]`` with ``edges`` and ``weights`` (Windmill).  The series gets
    one feature: ``[T, nodes, 1]``; ``node_ids`` comes from the file when present.

    Further layouts (``target_feature`` names the column holding the file's ``y``):
    per-step dicts ``"0" .. "T-1"`` (``time_periods``) with ``y`` (and/or ``X``) and a
    top-level ``edges`` / ``weights`` (WikiMath) -> :class:`Series`; per-step dicts that
    carry their own ``edges`` / ``weights`` plus ``X`` / ``y`` (Twitter tennis) and
    ``edge_mapping.edge_index[t]`` / ``edge_mapping.edge_weight[t]`` with ``y`` ``[T,
    nodes]`` (England COVID) -> :class:`DynamicSeries` (features ``[X..., y]``);
    ``nodes`` (``bus_stop``, ``X`` variables, ``y``) with ``links`` (``source``,
    ``target``, ``weight``) (Montevideo bus) -> :class:`Series` with the ``X`` variables
    (sorted by name) and then ``y`` as features.  Any other layout raises an error that
    names the keys found.  A ``time_periods`` below the steps the file holds reads the
    first ``time_periods`` steps, as PyTorch Geometric Temporal does, with a
    ``UserWarning`` naming the steps left unread.
    """
    dtype = _series_dtype(dtype)
    path = regular_file(path, "load_pgt_json: cannot read ", "no such file")
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError as exc:
        raise DDStoreValueError(f"load_pgt_json: cannot read {path}: {exc}") from None
    try:  # (a UTF-8 byte-order mark is skipped)
        doc = json.loads(text.decode("utf-8-sig"), **_finite_floats(text))
    except _Overflow as exc:
        line = text.count(b"\n", 0, max(0, text.find(exc.args[0].encode()))) + 1
        raise DDStoreValueError(f"load_pgt_json: {path}, line {line}: the number "
                                f"{exc.args[0]} is beyond float64's range (it would be "
                                f"stored as inf)") from None
    except UnicodeDecodeError as exc:
        line = text.count(b"\n", 0, exc.start) + 1
        raise DDStoreValueError(f"load_pgt_json: {path}, line {line}: byte {exc.start} "
                                f"({text[exc.start:exc.start + 1].hex()}) is not UTF-8 "
                                f"text; JSON files are UTF-8") from None
    except json.JSONDecodeError as exc:
        raise DDStoreValueError(f"load_pgt_json: {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise DDStoreValueError(f"load_pgt_json: {path}: JSON nested too deeply to read "
                                f"(a PGT data set is a few levels deep)") from None
    if not isinstance(doc, dict):
        raise DDStoreValueError(f"load_pgt_json: {path} holds a {type(doc).__name__}, "
                                f"expected an object")
    series = _pgt_layout(doc, path)(doc, path, dtype)
    series.files = (file_share(path, io.BytesIO(text)),)  # agreed by the layers
    return series


class _Overflow(ValueError):
    """A number of a JSON file beyond float64's range (its text the only argument)."""


def _finite_float(text):
    value = float(text)
    if math.isinf(value):  # (Infinity, a JSON extension, is a constant, not read here)
        raise _Overflow(text)
    return value


# a float of a JSON file that may be beyond float64 (about 1.8e308): an exponent of 3
# digits or more, or 309 digits or more in a row
_BIG_FLOAT = re.compile(rb"[eE]\+?0*[1-9][0-9]{2}|[0-9]{309}")


def _finite_floats(text):
    """``json.loads`` options that refuse a number the file holds beyond float64's range
    (Python's json reads it as inf), when the text may hold one: each float is then
    read by :func:`_finite_float` (slower than json's own), otherwise by json's own."""
    return {"parse_float": _finite_float} if _BIG_FLOAT.search(text) else {}


def _pgt_layout(doc, path):
    """The reader of the first layout in :data:`_LAYOUTS` whose keys ``doc`` has, or raise
    naming the keys found and the layouts known."""
    for _name, matches, read in _LAYOUTS:
        if matches(doc):
            return read
    raise _pgt_error(path, f"unknown layout: keys found {sorted(doc)[:20]}"
                           f"{' ...' if len(doc) > 20 else ''}; {_PGT_KNOWN}")


# ------------------------------------------------------------------------ the layouts
_MATRIX_KEYS = ("FX", "X", "block")


def _read_matrix(doc, path, dtype):
    """``FX`` (chickenpox), ``X`` + ``weights`` (PedalMe) or ``block`` + ``weights``
    (Windmill): a ``[T, nodes]`` matrix with a static ``edges`` -> ``[T, nodes, 1]``."""
    key = next(k for k in _MATRIX_KEYS if k in doc)
    try:
        data = _numbers(doc[key], np.float64, path, repr(key))
    except (TypeError, ValueError, OverflowError) as exc:
        raise DDStoreValueError(f"load_pgt_json: {path}: {key!r} is not a numeric array: "
                                f"{_ragged(doc[key]) or exc}") from None
    edges = _pgt_pairs(doc["edges"], path, "'edges'")
    data = _cast(check_series_array(data, f"{path}: {key!r}"), dtype, path, repr(key))
    weights = _pgt_weights(doc.get("weights"), edges.shape[1], path, "'weights'")
    node_ids = _pgt_node_ids(doc, data.shape[1], path)
    return Series(data.shape, data.dtype, lambda a, b: data[a:b], edge_index=edges,
                  edge_weight=weights, node_ids=node_ids,
                  source=f"{os.path.basename(str(path))}[{key}]")


def _read_edge_mapping(doc, path, dtype):
    """England COVID: per-step mobility graphs ``edge_mapping.edge_index[t]`` (and
    ``edge_weight[t]``), target ``y`` ``[T, nodes]`` -> :class:`DynamicSeries`."""
    mapping = doc["edge_mapping"]
    if not isinstance(mapping, dict) or "edge_index" not in mapping:
        got = sorted(mapping) if isinstance(mapping, dict) else repr(mapping)
        raise _pgt_error(path, f"edge_mapping must hold 'edge_index' (and "
                               f"'edge_weight'), got {got}")
    if "y" not in doc:
        raise _pgt_error(path, f"edge_mapping layout needs 'y' [T, nodes]; keys found: "
                               f"{sorted(doc)}")
    y = _pgt_matrix(doc["y"], path, "'y'")
    T = _pgt_num_steps(doc, path) if "time_periods" in doc else y.shape[0]
    if y.shape[0] != T:
        raise _pgt_error(path, f"'y' has {y.shape[0]} steps, time_periods={T}")
    index, weight = mapping["edge_index"], mapping.get("edge_weight")
    for key, value in (("edge_index", index), ("edge_weight", weight)):
        if (value is not None and not isinstance(value, dict)) or \
                (key == "edge_index" and value is None):
            raise _pgt_error(path, f"edge_mapping.{key} must be an object from each step "
                                   f"('0', '1', ...) to its "
                                   f"{'edges' if key == 'edge_index' else 'weights'}, got "
                                   f"{type(value).__name__}")
    _warn_beyond(path, T, index, "steps of edge_mapping.edge_index")
    edges, weights = [], None if weight is None else []
    for t in range(T):
        if str(t) not in index:
            raise _pgt_error(path, f"edge_mapping.edge_index has no step '{t}' (of "
                                   f"{T} time periods)")
        e = _pgt_pairs(index[str(t)], path, f"edge_mapping.edge_index['{t}']",
                       y.shape[1])
        edges.append(e)
        if weights is not None:
            if weight.get(str(t)) is None:  # (a unit weight made up for a step: no)
                raise _pgt_error(path, f"edge_mapping.edge_weight has no step '{t}' "
                                       f"(give weights on every step or on none)")
            weights.append(_pgt_weights(weight[str(t)], e.shape[1], path,
                                        f"edge_mapping.edge_weight['{t}']"))
    data = _cast(y[:, :, None], dtype, path, "'y'")
    return DynamicSeries(data, edges, weights, target_feature=0,
                         node_ids=_pgt_node_ids(doc, data.shape[1], path),
                         source=f"{os.path.basename(str(path))}[edge_mapping]")


def _read_steps_dynamic(doc, path, dtype):
    """Twitter tennis: per-step dicts, each with its own ``edges`` (and ``weights``)
    besides ``X`` / ``y`` -> :class:`DynamicSeries`."""
    steps = _pgt_steps(doc, path)
    data, target = _pgt_step_signals(steps, path, dtype)
    node_ids = _pgt_node_ids(doc, data.shape[1], path)
    edges, weights = [], []
    weighted = [step.get("weights") is not None for step in steps]
    if any(weighted) and not all(weighted):  # (a unit weight made up for a step: no)
        raise _pgt_error(path, f"step '{weighted.index(False)}' has no 'weights' (step "
                               f"'{weighted.index(True)}' has): give weights on every "
                               f"step or on none")
    for t, step in enumerate(steps):
        if "edges" not in step:
            raise _pgt_error(path, f"step '{t}' has no 'edges' (step '0' has)")
        e = _pgt_pairs(step["edges"], path, f"step '{t}' 'edges'", data.shape[1])
        edges.append(e)
        weights.append(_pgt_weights(step.get("weights"), e.shape[1], path,
                                    f"step '{t}' 'weights'"))
    if not any(weighted):
        weights = None
    return DynamicSeries(data, edges, weights, target_feature=target, node_ids=node_ids,
                         source=f"{os.path.basename(str(path))}[steps]")


def _read_steps_static(doc, path, dtype):
    """WikiMath: per-step dicts with ``y`` (and/or ``X``) and a top-level ``edges`` /
    ``weights`` -> :class:`Series` (``target_feature`` the column of ``y``)."""
    steps = _pgt_steps(doc, path)
    if "edges" not in doc:
        raise _pgt_error(path, f"per-step layout without edges: neither step '0' (keys "
                               f"{sorted(steps[0])}) nor the top level (keys "
                               f"{sorted(doc)[:12]}) has 'edges'")
    data, target = _pgt_step_signals(steps, path, dtype)
    node_ids = _pgt_node_ids(doc, data.shape[1], path)
    e = _pgt_pairs(doc["edges"], path, "'edges'")
    series = Series(data.shape, data.dtype, lambda a, b: data[a:b], edge_index=e,
                    edge_weight=_pgt_weights(doc.get("weights"), e.shape[1], path,
                                             "'weights'"),
                    node_ids=node_ids, source=f"{os.path.basename(str(path))}[steps]")
    series.target_feature = target
    return series


def _read_nodes_links(doc, path, dtype):
    """Montevideo bus: node records (``bus_stop``, ``X`` variables, ``y``) and link
    records (``source``, ``target``, ``weight``) -> :class:`Series` with the ``X``
    variables (sorted by name) and then ``y`` as features."""
    nodes, links = doc["nodes"], doc["links"]
    if not isinstance(nodes, list) or not nodes or not isinstance(links, list):
        raise _pgt_error(path, "'nodes' must be a non-empty list and 'links' a list")
    ids = [n.get("bus_stop", n.get("id", i)) if isinstance(n, dict) else None
           for i, n in enumerate(nodes)]
    if any(i is None for i in ids):
        raise _pgt_error(path, "every entry of 'nodes' must be an object")
    bad = next((k for k, i in enumerate(ids) if not isinstance(i, (str, int, float))), None)
    if bad is not None:
        raise _pgt_error(path, f"node {bad}'s id {ids[bad]!r} is not a string or a number")
    if len(set(ids)) != len(ids):
        dup = next(i for k, i in enumerate(ids) if i in ids[:k])
        raise _pgt_error(path, f"node id {dup!r} appears twice in 'nodes'")
    bad = next((k for k, d in enumerate(links) if not isinstance(d, dict)), None)
    if bad is not None:
        raise _pgt_error(path, f"link {bad} is {links[bad]!r}, not an object with "
                               f"'source', 'target' (and 'weight')")
    pos = {i: k for k, i in enumerate(ids)}
    for k, d in enumerate(links):
        lack = [key for key in ("source", "target") if key not in d]
        if lack:
            raise _pgt_error(path, f"link {k} has no {' or '.join(map(repr, lack))}")
    try:
        src = [pos[d["source"]] for d in links]
        dst = [pos[d["target"]] for d in links]
    except KeyError as exc:
        raise _pgt_error(path, f"a link refers to node {exc.args[0]!r}, which is not "
                               f"in 'nodes'") from None
    except TypeError:  # an unhashable source / target (a list, an object)
        raise _pgt_error(path, "a link's 'source' or 'target' is not a node id (a string "
                               "or a number)") from None
    w = _pgt_weights([d.get("weight", 1.0) for d in links], len(links), path,
                     "the links' 'weight'")
    feats = sorted(nodes[0]["X"]) if isinstance(nodes[0].get("X"), dict) else []
    cols = []
    for k, n in enumerate(nodes):
        X = n.get("X") or {}
        if not isinstance(X, dict):
            raise _pgt_error(path, f"node {ids[k]!r}: 'X' is {X!r}, not an object "
                                   f"variable -> series")
        if sorted(X) != feats:
            raise _pgt_error(path, f"node {ids[k]!r} has X variables {sorted(X)}, node "
                                   f"{ids[0]!r} has {feats}")
        if "y" not in n:
            raise _pgt_error(path, f"node {ids[k]!r} has no 'y' (keys {sorted(n)})")
        cols.append([X[f] for f in feats] + [n["y"]])
    try:
        arr = _numbers(cols, np.float64, path, "the nodes' series")  # [N, F, T]
    except (TypeError, ValueError, OverflowError) as exc:
        raise _pgt_error(path, f"node series are not numeric or differ in length: "
                               f"{exc}") from None
    if arr.ndim != 3:
        raise _pgt_error(path, f"node series must be lists of numbers of one length, "
                               f"got shape {arr.shape}")
    data = _cast(arr.transpose(2, 0, 1), dtype, path, "the nodes' series")
    series = Series(data.shape, data.dtype, lambda a, b: data[a:b],
                    edge_index=np.array([src, dst], dtype=np.int64).reshape(2, -1),
                    edge_weight=w, node_ids=ids,
                    source=f"{os.path.basename(str(path))}[nodes/links]")
    series.target_feature = data.shape[2] - 1
    series.feature_names = feats + ["y"]
    return series


def _has_steps(doc):
    return isinstance(doc.get("0"), dict)


# (layout, test on the file's top-level object, reader ``(doc, path, dtype)``), tried in
# this order: a matrix with edges wins over everything; per-step dicts whose step '0'
# has edges are dynamic, others take the top-level edges
_LAYOUTS = (
    ("FX / X / block", lambda doc: "edges" in doc and any(k in doc for k in _MATRIX_KEYS),
     _read_matrix),
    ("edge_mapping", lambda doc: "edge_mapping" in doc, _read_edge_mapping),
    ("per-step, own edges", lambda doc: _has_steps(doc) and "edges" in doc["0"],
     _read_steps_dynamic),
    ("per-step", _has_steps, _read_steps_static),
    ("nodes / links", lambda doc: "nodes" in doc and "links" in doc, _read_nodes_links),
)


# ----------------------------------------------------------------- per-step helpers
def _pgt_steps(doc, path):
    """The per-step dicts ``doc['0'] .. doc[str(T - 1)]``, or raise naming the first
    that is missing or not an object."""
    T = _pgt_num_steps(doc, path)
    steps = []
    for t in range(T):
        step = doc.get(str(t))
        if not isinstance(step, dict):
            raise _pgt_error(path, f"step '{t}' (of {T} time periods) is missing or "
                                   f"not an object")
        steps.append(step)
    return steps


def _pgt_step_signals(steps, path, dtype):
    """The node signals ``[T, nodes, features]`` of per-step dicts (each step's ``X``
    columns, then ``y``) and the column of ``y`` (None when step '0' has none).  Every
    step must hold the keys and columns of step '0' (one step's 'y' column would
    otherwise be another's 'X' column)."""
    cols, target, num_nodes, first = [], None, None, None
    for t, step in enumerate(steps):
        parts, layout = [], []
        for key in ("X", "y"):
            if key in step:
                arr = _pgt_node_values(step[key], num_nodes, path, f"step '{t}' {key!r}")
                num_nodes = arr.shape[0]
                if t == 0 and key == "y":
                    target = sum(p.shape[1] for p in parts)
                parts.append(arr)
                layout.append(f"{key!r} of {arr.shape[1]} column(s)")
        if not parts:
            raise _pgt_error(path, f"step '{t}' has neither 'X' nor 'y' (keys "
                                   f"{sorted(step)})")
        if first is None:
            first = layout
        elif layout != first:
            raise _pgt_error(path, f"step '{t}' has {' and '.join(layout)}, step '0' "
                                   f"{' and '.join(first)}: every step needs the same "
                                   f"keys and columns")
        cols.append(np.concatenate(parts, axis=1))
    if len({c.shape for c in cols}) != 1:
        raise _pgt_error(path, f"steps have different node/feature shapes "
                               f"{sorted({c.shape for c in cols})}")
    return _cast(np.stack(cols), dtype, path, "the steps' 'X' / 'y'"), target


# ------------------------------------------------------------------- shared helpers
_PGT_KNOWN = ("expected 'edges' and one of 'FX' (chickenpox), 'X' + 'weights' (PedalMe), "
              "'block' + 'weights' (Windmill), per-step '0', '1', ... with 'y' "
              "(WikiMath); or 'edge_mapping' + 'y' + 'time_periods' (England COVID); or "
              "per-step '0', '1', ... with their own 'edges', 'weights', 'X', 'y' "
              "(Twitter tennis); or 'nodes' + 'links' (Montevideo bus)")


def _series_dtype(dtype):
    """``dtype`` (the series' numpy dtype) checked: a floating-point type (the file's
    numbers are read as float64; an integer type would truncate them and turn NaN into
    garbage)."""
    return as_dtype(dtype, "load_pgt_json: dtype", "f", "float16, float32, float64",
                    (2, 4, 8))


def _cast(values, dtype, path, what):
    """float64 ``values`` ``[T, nodes, F]`` as a C-ordered ``dtype`` array, or raise
    naming the first value that the cast made infinite (beyond the dtype's range): a
    finite number in the file is never stored as inf; nor is a whole number (a count)
    stored as another (8469 as float16 is 8472): the first is named."""
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(values, dtype=dtype)
    if dtype.itemsize < 8:
        grew = ~np.isfinite(out) & np.isfinite(values)
        if grew.any():
            t, node, feat = (int(i) for i in np.argwhere(grew)[0])
            raise _pgt_error(path, f"{what}: step {t}, node {node}, feature {feat} holds "
                                   f"{float(values[t, node, feat])!r}, beyond dtype={dtype} "
                                   f"(largest finite {float(np.finfo(dtype).max):.4g}); "
                                   f"allowed: dtype=np.float64 for such values")
        # (below 2**53, where float64 holds every whole number: above it all are)
        whole = (values == np.round(values)) & (np.abs(values) <= 2.0 ** 53)
        moved = whole & (out != values)
        if moved.any():
            t, node, feat = (int(i) for i in np.argwhere(moved)[0])
            v = float(values[t, node, feat])
            raise _pgt_error(path, f"{what}: step {t}, node {node}, feature {feat} holds the "
                                   f"whole number {v:.17g}, which dtype={dtype} cannot hold "
                                   f"(it would be {float(out[t, node, feat]):.17g}); "
                                   f"allowed: a dtype that holds every whole number of the "
                                   f"file (float32 up to 2**24, float64 up to 2**53)")
    return out


def _numbers(value, dtype, path, what):
    """``value`` (a JSON number or nested lists of them) as a ``dtype`` array.  A string
    (``"12"``) or a boolean (``true``) anywhere in it raises a ``TypeError`` saying so
    (numpy would convert them); ``null`` is read as NaN (a missing value).  The callers
    word the error with ``what`` and ``path``."""
    types, level = set(), [value]
    while level:  # the leaves' types, one nesting level at a time
        deeper = []
        for v in level:
            if type(v) is list:
                deeper.extend(v)
            else:
                types.add(type(v))
        level = deeper
    odd = types - {int, float, type(None)}
    if odd:
        kind = {str: "a string", bool: "a boolean (true/false)", dict: "an object"}.get(
            min(odd, key=lambda t: t.__name__), "a non-number")
        raise TypeError(f"it holds {kind}; numbers only (null for a missing value)")
    with np.errstate(over="ignore"):
        return np.asarray(value, dtype=dtype)

def _pgt_error(path, msg):
    return DDStoreValueError(f"load_pgt_json: {path}: {msg}")


def _pgt_num_steps(doc, path):
    """Steps of a per-step layout: ``time_periods`` or the run of keys '0', '1', ..."""
    if "time_periods" in doc:
        T = doc["time_periods"]
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise _pgt_error(path, f"time_periods={T!r} must be a positive integer")
        _warn_beyond(path, T, doc, "per-step objects")
        return T
    T = 0
    while str(T) in doc:
        T += 1
    later = sorted(int(k) for k in doc if isinstance(k, str) and k.isascii() and
                   k.isdigit() and int(k) > T)
    if later:  # (the steps after a gap were dropped without a word)
        raise _pgt_error(path, f"step {later[0]} is there but step {T} is not: steps are "
                               f"'0' .. 'T-1' without a gap (or give time_periods)")
    return T


def _warn_beyond(path, T, keys, what):
    """Warn (a :class:`UserWarning`, on each rank that reads the file) when ``keys``
    hold steps ``'T'`` or later: ``time_periods`` says how many steps are read, as
    PyTorch Geometric Temporal reads them, and the rest would go unread unsaid."""
    more = [int(k) for k in keys if isinstance(k, str) and k.isascii() and k.isdigit()
            and int(k) >= T]
    if more:
        warnings.warn(f"load_pgt_json: {path}: time_periods={T} reads steps '0' .. "
                      f"'{T - 1}'; the file also holds {len(more)} {what} from "
                      f"'{min(more)}' to '{max(more)}', which are not read (as PyTorch "
                      f"Geometric Temporal reads such a file)", stacklevel=2)


def _pgt_pairs(pairs, path, what, num_nodes=None):
    """``[[src, dst], ...]`` (or ``[]``) -> int64 ``[2, E]``: every pair two integers
    (a whole float such as ``3.0`` is taken; ``1.7``, a string or an id beyond int64 is
    refused, naming the pair), the list exactly ``[E, 2]`` (a ``[2, E]`` list or rows of
    three are refused, not reshaped); with ``num_nodes``, every id in ``[0,
    num_nodes)`` (a step's graph: the file and step named, not the graph's steps)."""
    if pairs is None:
        raise _pgt_error(path, f"{what} is null (a graph with no edges is [])")
    why = None
    try:
        arr = _numbers(pairs, None, path, what)  # (a null: an object array, refused below)
    except (TypeError, ValueError, OverflowError) as exc:
        why = str(exc)
    if why is None and arr.size == 0:
        return np.zeros((2, 0), dtype=np.int64)
    if why is None and (arr.ndim != 2 or arr.shape[1] != 2):
        raise _pgt_error(path, f"{what} must be a list of [source, target] pairs (shape "
                               f"[E, 2]), got shape {arr.shape}")
    if why is None and arr.dtype.kind not in "iuf":
        why = f"values of type {arr.dtype.kind == 'O' and 'object' or arr.dtype} (an id " \
              f"beyond int64, or not a number)"
    if why is None:
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(arr) | (arr != np.round(arr)) if arr.dtype.kind == "f" \
                else np.zeros(arr.shape, bool)
            bad |= (arr >= 2.0 ** 63) | (arr < -2.0 ** 63)
        if bad.any():
            i = int(np.flatnonzero(bad.any(axis=1))[0])
            why = f"pair {i} is {arr[i].tolist()}"
    if why is not None:
        raise _pgt_error(path, f"{what} is not a list of [source, target] integer pairs: "
                               f"{why}")
    out = np.ascontiguousarray(arr.astype(np.int64).T)
    if num_nodes is not None and (out.min() < 0 or out.max() >= num_nodes):
        i = int(np.flatnonzero(((out < 0) | (out >= num_nodes)).any(axis=0))[0])
        raise _pgt_error(path, f"{what}: pair {i} is {out[:, i].tolist()}, a node id out "
                               f"of range [0, {num_nodes}) (the file's signals have "
                               f"{num_nodes} nodes)")
    return out


def _pgt_weights(values, num_edges, path, what):
    if values is None:
        return None
    try:
        given = _numbers(values, np.float64, path, what).reshape(-1)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _pgt_error(path, f"{what} is not numeric: {exc}") from None
    if given.shape[0] != num_edges:
        raise _pgt_error(path, f"{what} has {given.shape[0]} entries for {num_edges} "
                               f"edges")
    with np.errstate(over="ignore"):
        w = given.astype(np.float32)  # as weights are stored
    grew = ~np.isfinite(w) & np.isfinite(given)  # (NaN and inf: refused with the edge)
    if grew.any():
        i = int(np.argmax(grew))
        raise _pgt_error(path, f"{what}: edge {i} has weight {float(given[i])!r}, beyond "
                               f"float32 as weights are stored (largest finite "
                               f"{float(np.finfo(np.float32).max):.4g})")
    return w


def _pgt_node_values(value, num_nodes, path, what):
    """A per-step node array ``[N]`` or ``[N, F]`` -> float64 ``[N, F]``."""
    try:
        arr = _numbers(value, np.float64, path, what)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _pgt_error(path, f"{what} is not numeric: {exc}") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or (num_nodes is not None and arr.shape[0] != num_nodes):
        raise _pgt_error(path, f"{what} has shape {arr.shape}; expected [{num_nodes}] or "
                               f"[{num_nodes}, features]")
    return arr


def _pgt_node_ids(doc, num_nodes, path):
    """The file's ``node_ids``: a list as given, or a ``name -> index`` object turned
    into the list of names by index (an index that is not an integer in
    ``[0, num_nodes)`` raises)."""
    ids = doc.get("node_ids")
    if isinstance(ids, dict):  # name -> id
        names = [None] * num_nodes
        for name, i in ids.items():
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_nodes:
                raise _pgt_error(path, f"'node_ids'[{name!r}] = {i!r} is not an integer "
                                       f"node index in [0, {num_nodes})")
            if names[i] is not None:
                raise _pgt_error(path, f"'node_ids' gives index {i} to both "
                                       f"{names[i]!r} and {name!r}")
            names[i] = name
        if None in names:
            raise _pgt_error(path, f"'node_ids' names {len(ids)} of the {num_nodes} nodes; "
                                   f"node {names.index(None)} has no name")
        return names
    if ids is not None and (not isinstance(ids, list) or len(ids) != num_nodes):
        got = f"{len(ids)} entries" if isinstance(ids, list) else type(ids).__name__
        raise _pgt_error(path, f"'node_ids' must be a list of the {num_nodes} nodes' ids "
                               f"(or an object name -> index), got {got}")
    return ids


def _ragged(value):
    """For a list of lists whose lengths differ, the first row that differs from row 0,
    in words; else None."""
    if isinstance(value, list) and value and all(isinstance(r, list) for r in value):
        lens = [len(r) for r in value]
        t = next((t for t, n in enumerate(lens) if n != lens[0]), None)
        if t is not None:
            return f"row {t} has {lens[t]} values, row 0 has {lens[0]}"
    return None


def _pgt_matrix(value, path, what):
    """A ``[T, nodes]`` list of lists of numbers -> float64 array, or raise naming the
    first row whose length differs."""
    try:
        arr = _numbers(value, np.float64, path, what)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _pgt_error(path, f"{what} must be [T, nodes] numbers: "
                               f"{_ragged(value) or exc}") from None
    if arr.ndim != 2:
        raise _pgt_error(path, f"{what} must be [T, nodes], got shape {arr.shape}")
    return arr
