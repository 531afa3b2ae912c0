"""What one :class:`~ddstore.pyg.GraphStore` holds, the one object its three parts share:
the PyG adapter (:mod:`ddstore.pyg.graph_store`), the distributed CSC build
(:mod:`ddstore.pyg._csc_build`) and the per-edge attributes
(:mod:`ddstore.pyg._edge_attrs`) each take it as an argument and change it only through
what is public here."""
from torch_geometric.data.graph_store import EdgeLayout

from .._checks import is_aside
from .._readers import ahead
from ..errors import DDStoreError, DDStoreStateError, DDStoreValueError
from ._common import GRAPH_KIND, ROLLED_BACK, as_edge_type, check_recorded, recorded
from .feature_store import UnknownAttributeError

__all__ = ["Lists", "GraphState"]


class Lists:
    """One stored layout of an edge type: its variables and the replicated ``indptr``
    (global CSC row where each destination's list starts) and ``node_offsets``
    (destination-node range of each group member); ``layout`` / ``is_sorted`` as put,
    and ``ptr_nodes`` (CSR / CSC puts: the nodes of the pointer as put, else None).
    ``dropped``: True once ``build_backward(keep_in_lists=False)`` removed these lists'
    variables (``vars`` empty, ``indptr`` / ``node_offsets`` None): only the edge type's
    bookkeeping is left, and its out-lists hold the edges.  ``index_dtypes``: the numpy
    dtype strings of the two entries of the edge index as put (``get_edge_index``
    returns them), None for int64 (``put_edge_range``, out-lists).  ``held``: a handle
    on the ``nbr`` variable (``store`` given; :meth:`DDStore.handle`), bound to the
    variable made for these lists, not to its name, which a replacement may reuse."""

    def __init__(self, edge_type, size, num_edges, indptr, node_offsets, vars_, time_attr,
                 time_level, layout=EdgeLayout.COO, is_sorted=False, ptr_nodes=None,
                 node_times=None, time_dtype=None, store=None):
        self.edge_type, self.size, self.num_edges = edge_type, size, num_edges
        self.indptr, self.node_offsets, self.vars = indptr, node_offsets, vars_
        self.time_attr, self.time_level = time_attr, time_level
        self.node_times = node_times  # node-level time: the sources' times, replicated
        self.time_dtype = time_dtype  # the times' (int64, float64), None without times
        self.layout, self.is_sorted, self.ptr_nodes = layout, is_sorted, ptr_nodes
        self.removed = False
        self.dropped = False
        self.index_dtypes = None  # put_edge_index: its entries' dtypes (None: int64)
        self.held = (store.handle(vars_["nbr"]) if store is not None and "nbr" in vars_
                     else None)


class GraphState:
    """The settings and stored lists of one graph store.

    ``store``, ``name``, ``time_attr``, ``chunk_edges`` (fixed), ``weight_attr`` (set
    once by ``put_edge_weights``); ``stored``: ``(edge type, EdgeLayout)`` -> its
    in-lists (:class:`Lists`), in the order put; ``sampled``: edge type -> the in-lists
    the sampler reads (:meth:`choose`); ``reversed``: ``(edge type, EdgeLayout)`` -> its
    out-lists (``build_backward``); ``node_times``: node-time variable -> its replicated
    times.  :meth:`changed_in_step` (the adapter's ``on_change``, in a step) records the
    state in the store's annotation, at the end of every collective call that changes
    it; :meth:`changed`, in what a rollback calls, only tells forked workers."""

    def __init__(self, store, name, time_attr, weight_attr, chunk_edges, on_change):
        self.store, self.name, self.time_attr = store, name, time_attr
        self.weight_attr, self.chunk_edges = weight_attr, chunk_edges
        self.stored, self.sampled, self.reversed, self.node_times = {}, {}, {}, {}
        self._on_change = on_change
        # the record of the name this object last wrote or read (an empty one's it
        # replaces, or none: a graph store made; the one opened)
        self._mine = recorded(store, GRAPH_KIND, name)
        self.rolled_back = ""  # said with "nothing stored" once a rollback removed it

    def made_in_step(self):
        """Collective, the constructor's last step: its record, in a transaction whose
        rollback (an enclosing transaction's) leaves the object saying so."""
        with self.store.transaction(f"GraphStore {self.name!r}") as txn:
            txn.on_rollback(lambda: setattr(self, "rolled_back", ROLLED_BACK % "GraphStore"))
            self.changed_in_step()  # (a rollback: the journal gives the name its record)

    def changed(self):
        """Local, in a rollback's callables: tell the processes forked before (the
        annotation is the transaction journal's to give back)."""
        self._on_change(record=False)

    def check_mine(self):
        """Local, in the first step of a change: refuse it when another object of the
        name changed the record since this one wrote or read it (before anything is
        set aside: a removal takes the record along)."""
        check_recorded(self.store, GRAPH_KIND, self.name, self._mine, "GraphStore")

    def record(self):
        """Local, alike on every rank, in a step of the call that changed the state:
        record it in the store's annotation (and tell forked workers); refused when
        another object of the name changed the record since this one wrote or read it
        (:meth:`check_mine`)."""
        self.check_mine()
        prev = self._mine
        with self.store.transaction("GraphStore record") as txn:  # (joins the call's)
            txn.on_rollback(lambda: setattr(self, "_mine", prev))  # (the journal puts
            self._on_change()  # the annotation back: this object's again)
            self._mine = recorded(self.store, GRAPH_KIND, self.name)

    def changed_in_step(self):
        """Collective, a step of the call that changed the state: :meth:`record`, a
        rank failing in it (a ``MemoryError``, an interrupt) agreed, so that the call's
        transaction rolls back on every rank."""
        with self.store.collective(None):
            self.record()

    def built(self, backward):
        """The lists a build adds to: the in-lists, or (``backward``) the out-lists."""
        return self.reversed if backward else self.stored

    def choose(self, edge_type):
        """Set ``sampled[edge_type]``, the layout the sampler reads: the one PyG's
        ``csc()`` converts from (a stored CSC, else COO, else CSR; for edge type None,
        whose ``csc()`` PyG takes from its first edge attribute, the first put)."""
        have = [k[1] for k in self.stored if k[0] == edge_type]
        if not have:
            self.sampled.pop(edge_type, None)
            return
        if edge_type is not None:
            have = sorted(have, key=[EdgeLayout.CSC, EdgeLayout.COO, EdgeLayout.CSR].index)
        self.sampled[edge_type] = self.stored[(edge_type, have[0])]

    def entry(self, edge_type, what, layout=None):
        """The sampled in-lists of ``edge_type`` (``layout`` None) or its stored
        ``layout``; a :class:`~ddstore.pyg.UnknownAttributeError` (a ``KeyError``)
        naming what is stored when there is none."""
        edge_type = as_edge_type(edge_type)
        c = self.sampled.get(edge_type) if layout is None else self.stored.get(
            (edge_type, EdgeLayout(layout)))
        if c is None:
            self.store.check_alive()
            known = [f"({k[0]!r}, {k[1].value!r})" for k in self.stored]
            which = f"edge type {edge_type!r}" + (
                "" if layout is None else f" in layout {EdgeLayout(layout).value!r}")
            raise UnknownAttributeError(f"{what}: no {which} in graph store {self.name!r}; "
                                        f"stored (edge type, layout): "
                                        f"{', '.join(known) if known else 'none'}"
                                        f"{self.rolled_back}")
        return self.live(c, what)

    def live(self, c, what):
        """``c``, after checking that its variables are still those made for it (not
        removed, nor replaced by others of their names): another
        :class:`~ddstore.pyg.GraphStore` object over the same store and name (one
        :meth:`~ddstore.pyg.GraphStore.open` gave) that replaced or removed these lists
        removed them; a :class:`~ddstore.DDStoreStateError` naming the edge type."""
        if c.dropped:  # (build_backward(keep_in_lists=False)): its edges' out-lists
            out = self.reversed.get((c.edge_type, c.layout))
            held = None if out is None else out.held
        else:
            held = c.held
        # (a variable set aside by an open transaction is another object's replacement
        # or removal: refused, but to a batch made ahead, which still reads it)
        if held is None or (held in self.store and not is_aside(held.name)) or \
                (ahead() and self._aside(held)):
            return c
        self.store.check_alive()
        raise DDStoreStateError(
            f"{what}: the edges of edge type {c.edge_type!r} (layout {c.layout.value!r}) "
            f"in graph store {self.name!r} were replaced or removed by another GraphStore "
            f"object over this store and name; use that object, or "
            f"GraphStore.open(store, {self.name!r}) for the graph store as it is now")

    def _aside(self, held):
        """Whether variable ``held`` is set aside by an open transaction, not removed:
        a batch made ahead (:func:`~ddstore._readers.ahead`) still reads it, by its
        name (docs/pyg.md: the stores changed under a live read-ahead)."""
        try:
            return self.store.handle(held.name) is held
        except DDStoreError:
            return False

    def out_lists(self, c):
        """The out-lists of stored layout ``c``, or None (not built)."""
        return self.reversed.get((c.edge_type, c.layout))

    def holding(self, c):
        """The lists of stored layout ``c`` that hold its edges (and weights): its
        in-lists, or its out-lists once the in-lists were dropped
        (``build_backward(keep_in_lists=False)``)."""
        return self.reversed[(c.edge_type, c.layout)] if c.dropped else c

    def dropped_error(self, c, what):
        """The error of a call that reads the in-lists of ``c``, which
        ``build_backward(keep_in_lists=False)`` removed."""
        return DDStoreValueError(
            f"{what}: graph store {self.name!r} holds no in-lists of edge type "
            f"{c.edge_type!r} (layout {c.layout.value!r}): build_backward(keep_in_lists="
            f"False) dropped them and kept only its out-lists; sample it with "
            f"sample_direction='backward', or remove_edge_index and put it again to "
            f"read its in-lists")
