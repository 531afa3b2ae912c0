"""The per-edge attributes of a :class:`~ddstore.pyg.GraphStore`: its time readers (the
times a build sorts the lists by: an edge attribute kept per entry, or a node attribute
of the source type kept replicated), its weights (checked, and kept in CSC order for
the weighted sampler: at a put or by ``put_edge_weights``) and its out-lists
(``build_backward``: the CSC of the reversed edges).

:class:`EdgeAttributes` works on the graph store's state
(:class:`~ddstore.pyg._graph_state.GraphState`), given at construction; the
distributed build (:mod:`ddstore.pyg._csc_build`) calls its readers (``time_reader``,
``weight_var``, ``weight_scan``, ``raise_bad_weight``, ``weight_fill``,
``rows_to_edge_ids``), and ``build_backward`` runs that build."""
import numpy as np

from .. import partition
from .._collective import call_name
from .._times import as_times, time_dtype_of
from .._checks import as_bool
from ..errors import DDStoreIndexError, DDStoreValueError
from ..build import create, default_chunk_edges
from ._common import as_edge_type, as_values, edge_var, is_edge_type, node_var, \
    value_dtype
from ._csc_build import build, decide, first_pass
from .feature_store import UnknownAttributeError

__all__ = ["EdgeAttributes", "checked_weight_attr", "weight_dtype"]


class EdgeAttributes:
    """The times, weights and out-lists of the graph store whose state is ``state``."""

    def __init__(self, state):
        self.state = state

    @staticmethod
    def raise_bad_weight(found, w, what):
        """After the round of a step that scanned weights (``found``: every rank's
        :meth:`weight_scan`): raise, alike on every rank, a
        :class:`~ddstore.DDStoreValueError` naming the smallest edge id with a bad weight
        and its value, if any rank found one."""
        found = [x for x in found if x is not None]
        if found:
            eid, value = min(found)
            raise DDStoreValueError(f"{what}: weight_attr {w!r}: edge {eid} has weight "
                                    f"{value!r}; weights must be finite and >= 0")

    def time_reader(self, edge_type, lo, hi, max_src, what):
        """Local (a step's local part): ``(times, level)``: ``times(a, b, src)`` checks
        the times of local edges ``[a, b)`` (``src``: their sources; raising a
        :class:`~ddstore.DDStoreError`) and, edge-level, returns them from the feature
        store as ``times.dtype`` (int64 for an integer attribute, else float64); ``level``
        is "edge" or "node" (both None: a hetero edge type whose source type has no time
        attribute).  Node-level, nothing is returned: the build sorts through
        ``times.node_times`` (the source type's times, replicated).
        ``times.check_pass``: whether a pass over the edges must check their times
        before the build (node-level time: only when some node's time is not a finite
        time of ``times.dtype``; a source beyond the node times is found from
        ``max_src``, the largest source of every rank's edges).  Raises when the time
        attribute is missing, ambiguous, malformed or too short."""
        state = self.state
        st, name, t = state.store, state.name, state.time_attr
        evar = edge_var(name, edge_type, t)
        nvar = node_var(name, None if edge_type is None else edge_type[0], t)
        has_e, has_n = evar in st, nvar in st
        if has_e and has_n:
            raise DDStoreValueError(f"{what}: time_attr {t!r} is both an edge attribute "
                                    f"({evar!r}) and a node attribute ({nvar!r}); keep one")
        if not has_e and not has_n and edge_type is not None:
            # PyG's rule: a source node type without the time attribute is always
            # eligible; the edge type is stored (and sampled) without times
            return None, None
        if not has_e and not has_n:
            raise UnknownAttributeError(f"{what}: time_attr {t!r} not found: put it first "
                                        f"as an edge attribute of the edge type ({evar!r}) "
                                        f"or a node attribute of the source type "
                                        f"({nvar!r})")
        var = evar if has_e else nvar
        if st.row_shape(var) not in ((), (1,)) or value_dtype(st, var).kind not in "iuf":
            raise DDStoreValueError(f"{what}: time_attr {t!r} must hold one real number "
                                    f"per row, got dtype {st.dtype(var)} row shape "
                                    f"{st.row_shape(var)}")
        nrows = st.nrows(var)
        if has_e and hi > nrows:
            raise DDStoreIndexError(f"{what}: edge time {var!r} has {nrows} rows, fewer "
                                    f"than the edges [{lo}, {hi})")

        tdt = time_dtype_of(value_dtype(st, var))  # int64 for integers, else float64

        def checked(raw, ids, label):
            raw = as_values(st, var, raw)
            ts = as_times(raw.reshape(-1), tdt, f"{what}: time_attr {t!r}", copy=False)
            if ts.size and not np.isfinite(ts).all():
                i = int(np.flatnonzero(~np.isfinite(ts))[0])
                raise DDStoreValueError(f"{what}: time_attr {t!r}: {label} {int(ids[i])} "
                                        f"has time {ts[i]}; times must be finite")
            return ts
        if has_e:
            def times(a, b, src):
                return checked(st.get_range(var, lo + a, b - a),
                               np.arange(lo + a, lo + b), "edge")
            times.check_pass, times.dtype = True, tdt
            return times, "edge"
        if max_src >= nrows:
            raise DDStoreIndexError(f"{what}: node time {var!r} has {nrows} rows, source "
                                    f"node {max_src} is out of range")
        # node-level: the source type's times, replicated (what the sampler searches
        # through each entry's source; no time per entry is stored); a time its dtype
        # does not hold exactly, NaN or infinite is refused when an edge's source has it
        node_times, bad = self._replicated_times(var, tdt)

        def times(a, b, src):
            if bad.size:
                hit = np.unique(src[np.isin(src, bad)])
                if hit.size:
                    checked(st.get_batch(var, hit.astype(np.int64)), hit, "node")
        times.node_times, times.check_pass, times.dtype = node_times, bool(bad.size), tdt
        return times, "node"

    def _replicated_times(self, var, tdt):
        """``(times, bad)``: node-time variable ``var`` read whole onto this rank (in
        pieces), as times of ``tdt`` (:func:`~ddstore._times.time_dtype_of` its dtype):
        integers as int32 when every one fits, else int64; floats as float32 when every
        time is exactly a float32 (float32 and float16 attributes...), else float64; and
        the sorted ids of the nodes whose time is not a finite time of ``tdt`` (uint64
        values beyond int64, NaN, infinities).  The same array as an earlier call's when
        equal (edge types with one source type share it)."""
        state = self.state
        st = state.store
        n = int(st.nrows(var))
        out = np.empty(n, dtype=tdt)
        bad = []
        step = 1 << 20
        for a in range(0, n, step):
            raw = as_values(st, var, st.get_range(var, a, min(step, n - a))).reshape(-1)
            if tdt.kind == "i":  # beyond int64 (uint64 only): refused if an edge uses it
                wrong = raw > np.iinfo(np.int64).max if raw.dtype == np.uint64 else \
                    np.zeros(raw.shape[0], bool)
                out[a:a + raw.shape[0]] = np.where(wrong, 0, raw)
            else:
                out[a:a + raw.shape[0]] = raw
                wrong = ~np.isfinite(out[a:a + raw.shape[0]])
            bad.append(a + np.flatnonzero(wrong))
        bad = np.concatenate(bad) if bad else np.zeros(0, np.int64)
        with np.errstate(over="ignore"):  # beyond float32: inf there, so not narrowed
            narrow = out.astype(np.int32 if tdt.kind == "i" else np.float32)
        if np.array_equal(narrow, out, equal_nan=tdt.kind == "f"):  # every time exact
            out = narrow
        del narrow
        old = state.node_times.get(var)
        if old is not None and np.array_equal(old, out, equal_nan=True):
            out = old
        state.node_times[var] = out
        return out, bad


    # ------------------------------------------------------------------ edge weights
    def weight_var(self, w, edge_type, num_edges, what, required=False):
        """Local (a step's local part): the name of the edge attribute ``w`` of
        ``edge_type`` holding its weights, checked (one real number per edge, at least
        ``num_edges`` rows), or None when ``w`` is None or a hetero edge type lacks it
        (sampled uniformly, as PyG does) and not ``required``.  Raises otherwise."""
        state = self.state
        st = state.store
        if w is None:
            return None
        var = edge_var(state.name, edge_type, w)
        if var not in st:  # the same on every rank (variables are collective)
            if edge_type is not None and not required:
                return None
            node = node_var(state.name, None if edge_type is None else edge_type[0], w)
            why = "" if node not in st else (
                f"; {w!r} is stored as a node attribute ({node!r}, {st.nrows(node)} rows): "
                f"a value with as many rows as nodes and edges is taken as a node "
                f"attribute unless its name contains 'edge' (PyG's rule); put it with "
                f"group_name=<the edge type> (from_pyg does so for its weight_attr)")
            raise UnknownAttributeError(
                f"{what}: weight_attr {w!r} not found: put it first as an edge attribute "
                f"({var!r}), one weight per edge{why}")
        if st.row_shape(var) not in ((), (1,)) or value_dtype(st, var).kind not in "iuf":
            raise DDStoreValueError(
                f"{what}: weight_attr {w!r} must hold one real number per edge, got dtype "
                f"{st.dtype(var)} row shape {st.row_shape(var)}")
        if st.nrows(var) < num_edges:
            raise DDStoreIndexError(
                f"{what}: weight_attr {w!r} ({var!r}) has {st.nrows(var)} rows, fewer than "
                f"the {num_edges} edges")
        return var

    def weight_scan(self, var, lo, hi, piece):
        """Local (a step's local part): the weights of edges ``[lo, hi)`` of edge
        attribute ``var`` read in pieces of ``piece``: ``(edge id, weight)`` of the
        first negative, NaN or infinite one, or None.  The caller agrees on it and hands
        every rank's to :meth:`raise_bad_weight`."""
        st = self.state.store
        for a in range(lo, hi, piece):
            b = min(a + piece, hi)
            x = as_values(st, var, st.get_range(var, a, b - a)).reshape(-1).astype(
                np.float64)
            wrong = ~(np.isfinite(x) & (x >= 0))
            if wrong.any():
                p = int(np.argmax(wrong))
                return a + p, float(x[p])
        return None

    def weight_fill(self, prefix, weights, eid_name, n_csc, chunk, what):
        """Collective step of a put, inside its transaction: the weight column
        ``<prefix>w`` (one per CSC row, in CSC order, so that the sampler reads a list's
        weights with the list: :func:`weight_dtype` of the attribute), this rank's
        chunk gathered from the edge attribute ``weights`` by the chunk's edge ids, in
        pieces of ``chunk`` rows.  Returns its name."""
        st = self.state.store
        view = create(st, prefix + "w", n_csc, (), weight_dtype(value_dtype(st, weights)))
        self._fill_by_ids(view, weights, st.local_view(eid_name, writable=False), chunk,
                          what)  # (read only: a writable view counts as a write)
        return prefix + "w"

    def _fill_by_ids(self, view, source, ids, chunk, what):
        """Collective: ``view[i] = source[ids[i]]`` (``view`` and ``ids`` this rank's
        rows, ``source`` a store variable read one-sidedly) in pieces of ``chunk``;
        ``ids`` may be ``view`` itself.  The gather is the local part of a step: a
        failure on any rank is agreed; then every rank syncs."""
        st = self.state.store
        with st.collective(None):
            for a in range(0, view.shape[0], chunk):
                b = min(a + chunk, view.shape[0])
                view[a:b] = as_values(st, source, st.get_batch(
                    source, ids[a:b].astype(np.int64))).reshape(-1)
        del view, ids
        st.sync()

    def put_edge_weights(self, weight_attr, edge_type=None):
        """Collective: :meth:`GraphStore.put_edge_weights
        <ddstore.pyg.GraphStore.put_edge_weights>` (its docstring says what it does)."""
        state = self.state
        st = state.store
        what = f"put_edge_weights ({edge_type!r})"
        with st.collective("GraphStore.put_edge_weights", call_name(edge_type),
                           same={"weight_attr": weight_attr}) as step:
            checked_weight_attr(weight_attr)
            if weight_attr is None:
                raise DDStoreValueError(f"{what}: weight_attr must be a non-empty str")
            c = state.entry(edge_type, what)
            if state.weight_attr not in (None, weight_attr):
                raise DDStoreValueError(f"{what}: graph store {state.name!r} is weighted "
                                        f"by {state.weight_attr!r}, not {weight_attr!r} "
                                        f"(one weight_attr per graph store)")
            if "w" in state.holding(c).vars:
                raise DDStoreValueError(f"{what}: edge type {edge_type!r} is already "
                                        f"weighted by {state.weight_attr!r}")
            var = self.weight_var(weight_attr, c.edge_type, c.num_edges, what,
                                  required=True)
            lo, hi = partition(c.num_edges, st.size, st.rank)
            piece = state.chunk_edges or default_chunk_edges(c.num_edges, st.size, 24,
                                                             add_reverse=False)
            self.raise_bad_weight(step.agree(self.weight_scan(var, lo, hi, piece)),
                                  weight_attr, what)
        previous, state.weight_attr = state.weight_attr, weight_attr
        try:
            with st.transaction(f"GraphStore.put_edge_weights {edge_type!r}") as txn:
                # a rollback (newest first) annotates last, from the state then
                txn.on_rollback(state.changed)
                txn.on_rollback(lambda: setattr(state, "weight_attr", previous))
                if not c.dropped:  # (dropped in-lists: only the out-lists are weighted)
                    n_csc = _local_count(st, c.vars["eid"])
                    c.vars["w"] = self.weight_fill(c.vars["nbr"][:-len("nbr")], var,
                                                   c.vars["eid"], n_csc, piece, what)
                    txn.on_rollback(lambda: c.vars.pop("w", None))
                r = state.reversed.get((c.edge_type, c.layout))
                if r is not None:  # its out-lists: weights gathered by their edge ids
                    n_out = _local_count(st, r.vars["eid"])
                    r.vars["w"] = self.weight_fill(r.vars["nbr"][:-len("nbr")], var,
                                                   r.vars["eid"], n_out, piece, what)
                    txn.on_rollback(lambda: r.vars.pop("w", None))
                state.changed_in_step()
        except BaseException:
            state.weight_attr = previous
            raise
        return True

    # ------------------------------------------------------------------ out-lists
    def build_backward(self, edge_types=None, keep_in_lists=True):
        """Collective: :meth:`GraphStore.build_backward
        <ddstore.pyg.GraphStore.build_backward>` (its docstring says what it does)."""
        state = self.state
        st = state.store
        what = "build_backward"
        with st.collective("GraphStore.build_backward", call_name(edge_types)) as step:
            state.check_mine()
            keep_in_lists = as_bool(keep_in_lists, f"{what}: keep_in_lists")
            if edge_types is None:
                types = list(state.sampled)
            elif is_edge_type(as_edge_type(edge_types)):
                types = [as_edge_type(edge_types)]
            elif isinstance(edge_types, (list, tuple)):
                types = [as_edge_type(t) for t in edge_types]
            else:
                raise DDStoreValueError(f"{what}: edge_types must be None, an edge type or "
                                        f"a list of edge types, got {edge_types!r}")
            todo, drop = [], []
            for et in dict.fromkeys(types):
                c = state.entry(et, what)
                if (et, c.layout) not in state.reversed:
                    todo.append((et, c))
                if not keep_in_lists and not c.dropped:
                    drop.append(c)
            step.agree(same={"keep_in_lists": keep_in_lists})
        with st.transaction("GraphStore.build_backward") as txn:
            for et, c in todo:  # each the build of a put, from the stored CSC's rows
                lo, hi = partition(c.num_edges, st.size, st.rank)
                columns = self._reversed_columns(c, lo)
                with st.collective(None) as step:
                    plan = first_pass(state, columns, lo, hi, et,
                                      (c.size[1], c.size[0]), f"{what} ({et!r})",
                                      layout=c.layout, reverse_of=c)
                    decide(state, plan, step.agree(plan.share(), same=plan.same()))
                build(state, self, plan, columns)
            # every build succeeded: the in-lists (keep_in_lists=False) are set aside,
            # removed when the outermost transaction commits (at once, without an
            # enclosing one)
            kept = [(c, c.vars, c.indptr, c.node_offsets) for c in drop]

            def undo():  # an enclosing transaction rolled back: the in-lists are back
                for c, vars_, indptr, offsets in kept:
                    c.vars, c.indptr, c.node_offsets, c.dropped = vars_, indptr, \
                        offsets, False
                state.changed()
            txn.set_aside([v for c in drop for v in c.vars.values()], on_rollback=undo)
            for c in drop:
                c.vars, c.indptr, c.node_offsets, c.dropped = {}, None, None, True
            state.changed_in_step()
        return [et for et, _ in todo]

    def _reversed_columns(self, c, lo):
        """``columns(a, b)`` of the reversed edges of stored CSC ``c``: local column
        ``i`` is its CSC row ``lo + i`` as ``(destination, source)``, read in pieces."""
        st, nbr, indptr = self.state.store, c.vars["nbr"], c.indptr

        def columns(a, b):
            src = st.get_range(nbr, lo + a, b - a).reshape(-1).astype(np.int64)
            dst = np.searchsorted(indptr, np.arange(lo + a, lo + b, dtype=np.int64),
                                  side="right") - 1
            return dst, src
        return columns

    def rows_to_edge_ids(self, eid_name, of_eid, n_csc, chunk, what):
        """Collective step of :meth:`build_backward`: this rank's chunk of ``eid_name``
        holds CSC rows of the forward lists; replace them by the edge ids those rows
        hold (``of_eid``), in pieces of ``chunk``."""
        view = self.state.store.local_view(eid_name)
        self._fill_by_ids(view, of_eid, view, chunk, what)


def _local_count(store, name):
    """Rows of variable ``name`` this rank holds (not a local view's length: a writable
    one counts as a write)."""
    lo, hi = store.local_rows(name)
    return hi - lo


def checked_weight_attr(weight_attr):
    """``weight_attr`` (None or a non-empty str), or raises naming it."""
    if weight_attr is not None and (not isinstance(weight_attr, str) or not weight_attr):
        raise DDStoreValueError(f"weight_attr must be None or a non-empty str, got "
                                f"{weight_attr!r}")
    return weight_attr


def weight_dtype(dtype):
    """The dtype of the weights kept in CSC order for an edge attribute of values of
    ``dtype`` (:func:`value_dtype`: a bfloat16 attribute's are float32):
    float32 for float32 and float16 (float32 holds each of their values exactly, so the
    sampler's doubles are those of the attribute), float64 for anything else (float64
    itself, and integers, which float32 may round)."""
    return np.dtype(np.float32) if np.dtype(dtype) in (np.float32, np.float16) \
        else np.dtype(np.float64)
