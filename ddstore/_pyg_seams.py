"""The places where ddstore relies on PyG internals, one function each, and
:func:`check`, which says by name which of them a PyG release changed.

- :func:`set_batch_tables`: a ``Batch`` built without ``Batch.from_data_list`` (the
  fast path of :func:`ddstore.graphs.layout`) gets the private tables PyG's own
  collate writes (``_num_graphs``, ``_slice_dict``, ``_inc_dict``), which
  ``Batch.num_graphs``, ``get_example``, ``index_select`` and ``to_data_list`` read.
- :func:`new_data_batch`: an empty ``Batch`` of ``Data`` made by calling its class
  (the one ``Batch(_base_cls=Data)`` makes, found once) without PyG's metaclass, whose
  ``__call__`` inspects ``Data.__init__``'s signature on every call: 70 us of a graph
  batch's 700.
- :func:`after_loader_init`: PyG's ``NodeLoader.__init__`` and ``LinkLoader.__init__``
  (so ``NeighborLoader`` and ``LinkNeighborLoader``) wrapped once, so that a hook sees
  every loader just built and its sampler (``loader.node_sampler`` /
  ``loader.link_sampler``): :mod:`ddstore.pyg.workers` refuses worker processes that
  cannot work there.
- :func:`before_neighbor_loader_init`: PyG's ``NeighborLoader.__init__`` and
  ``LinkNeighborLoader.__init__`` wrapped once, so that a hook sees (and may change) the
  arguments by name before PyG builds its own sampler from them:
  :mod:`ddstore.pyg.loader_options` builds ours over ddstore's stores, or refuses
  sampling options the loader was given that differ from its ``neighbor_sampler``'s
  (PyG drops them silently when a sampler is given).  PyG offers no seam for this: its
  loaders call nothing on the sampler, the data or the DataLoader arguments while they are
  built (the sampler is stored, and first called in the worker, after the fork);
  ``worker_init_fn`` runs in the worker.  See docs/pyg.md, "Why PyG's loader classes are
  wrapped".

It sits at the package root, not in :mod:`ddstore.pyg`, so that :mod:`ddstore.graphs`
uses it without importing the PyG stores (nor installing the loader hook).

Nothing else in ddstore touches a private name of PyG's (the stores implement PyG's
abstract ``_put_edge_index`` / ``_put_tensor`` ... methods, whose renaming PyG reports
itself: the class cannot be instantiated).
"""
import functools
import inspect

__all__ = ["set_batch_tables", "new_data_batch", "after_loader_init",
           "before_neighbor_loader_init", "check", "probe_sampler"]

# PyG's loader classes, the attribute each keeps its sampler in
_LOADERS = (("NodeLoader", "node_sampler"), ("LinkLoader", "link_sampler"))
_HOOKS = []  # what after_loader_init installed, called in order
# PyG's neighbour loaders, and the arguments before_neighbor_loader_init's hooks read
_NEIGHBOR_LOADERS = ("NeighborLoader", "LinkNeighborLoader")
_NEIGHBOR_ARGS = ("data", "num_neighbors", "replace", "subgraph_type", "disjoint",
                  "temporal_strategy", "time_attr", "weight_attr", "directed",
                  "neighbor_sampler")
_ARG_HOOKS = []  # what before_neighbor_loader_init installed, called in order


def set_batch_tables(batch, num_graphs, slice_dict, inc_dict):
    """Give ``batch`` (a ``torch_geometric.data.Batch`` built attribute by attribute)
    the tables ``Batch.from_data_list`` writes: the number of graphs, and per key the
    slice of each graph (``num_graphs + 1`` offsets) and the increment added to it."""
    batch._num_graphs = num_graphs
    batch._slice_dict = slice_dict
    batch._inc_dict = inc_dict
    return batch


_BATCH_CLASS = []  # the class of Batch(_base_cls=Data), found on the first call


def new_data_batch():
    """An empty ``torch_geometric.data.Batch`` of ``Data`` (what ``Batch(_base_cls=
    Data)`` returns), made without PyG's metaclass call: the class it builds once and
    keeps is found once, then called as a plain class (``Data``'s constructor takes no
    required argument)."""
    if not _BATCH_CLASS:
        from torch_geometric.data import Batch, Data
        _BATCH_CLASS.append(type(Batch(_base_cls=Data)))
    return type.__call__(_BATCH_CLASS[0])


def _wrapped(init, attr):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        sampler = getattr(self, attr, None)
        for hook in list(_HOOKS):
            hook(self, sampler)
    __init__.ddstore_checked = True
    return __init__


def after_loader_init(hook):
    """Run ``hook(loader, sampler)`` after PyG's ``NodeLoader`` / ``LinkLoader``
    constructors (a ``NeighborLoader``, a ``LinkNeighborLoader``, ...); an exception it
    raises is raised by the constructor.  The constructors are wrapped once; a hook
    given again is not added twice."""
    from torch_geometric import loader
    for name, attr in _LOADERS:
        cls = getattr(loader, name)
        if not getattr(cls.__init__, "ddstore_checked", False):
            cls.__init__ = _wrapped(cls.__init__, attr)
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def _with_arguments(init, name):
    sig = inspect.signature(init)
    params = list(sig.parameters.values())
    var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if not _ARG_HOOKS:
            return init(self, *args, **kwargs)
        given = dict(sig.bind(self, *args, **kwargs).arguments)  # as passed, by name
        given.pop(params[0].name)
        given.update(given.pop(var_kw, {}) if var_kw else {})
        for hook in list(_ARG_HOOKS):
            given = hook(name, given)
        return init(self, **given)
    __init__.ddstore_arguments = True
    return __init__


def before_neighbor_loader_init(hook):
    """Run ``hook(class_name, arguments)`` when PyG's ``NeighborLoader`` or
    ``LinkNeighborLoader`` is built, before its constructor runs: ``arguments`` is a
    dict of the arguments passed (positional ones by their names; defaults not added),
    and the hook returns the dict the constructor is then called with.  The
    constructors are wrapped once; a hook given again is not added twice."""
    from torch_geometric import loader
    for name in _NEIGHBOR_LOADERS:
        cls = getattr(loader, name)
        if not getattr(cls.__init__, "ddstore_arguments", False):
            cls.__init__ = _with_arguments(cls.__init__, name)
    if hook not in _ARG_HOOKS:
        _ARG_HOOKS.append(hook)


def check():
    """The PyG internals ddstore relies on that the installed PyG no longer has, as a
    list of messages, each naming the PyG attribute and what in ddstore needs it
    (empty: all as expected)."""
    import torch
    import torch_geometric
    from torch_geometric.data import Batch, Data
    version = f"torch_geometric {torch_geometric.__version__}"
    problems = []
    data = [Data(x=torch.zeros(n, 1), edge_index=torch.zeros(2, 1, dtype=torch.long),
                 num_nodes=n) for n in (2, 3)]
    built = Batch.from_data_list(data)
    for name in ("_num_graphs", "_slice_dict", "_inc_dict"):
        if not hasattr(built, name):
            problems.append(f"{version}: Batch.from_data_list no longer sets Batch.{name}, "
                            f"which ddstore.graphs.layout's fast batch writes "
                            f"(ddstore._pyg_seams.set_batch_tables)")
    plain = Batch(_base_cls=Data)
    made = new_data_batch()
    if type(made) is not type(plain) or not isinstance(made, Batch) or \
            not isinstance(made, Data) or list(made.keys()) != list(plain.keys()):
        problems.append(f"{version}: Batch(_base_cls=Data) no longer returns an empty "
                        f"batch of a class kept from one call to the next, which "
                        f"ddstore.graphs.layout's fast batch makes by calling it "
                        f"(ddstore._pyg_seams.new_data_batch: {type(made)} against "
                        f"{type(plain)})")
    if not problems:
        ours = new_data_batch()
        for key in ("x", "edge_index", "batch", "ptr"):
            ours[key] = built[key]
        set_batch_tables(ours, built._num_graphs, built._slice_dict, built._inc_dict)
        try:
            back = ours.to_data_list()
            same = len(back) == len(data) and all(
                torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
                for a, b in zip(back, data)) and ours.num_graphs == len(data)
        except Exception as exc:  # noqa: BLE001 -- reported by name below
            same = f"{type(exc).__name__}: {exc}"
        if same is not True:
            problems.append(f"{version}: a Batch given Batch._num_graphs, "
                            f"Batch._slice_dict and Batch._inc_dict (set_batch_tables) "
                            f"no longer gives back its graphs ({same or 'they differ'})")
    problems += _check_loaders(version)
    problems += _check_neighbor_loaders(version)
    return problems


def probe_sampler():
    """A PyG ``BaseSampler`` that samples nothing (every call raises
    ``NotImplementedError``): what a loader is built over to see what its constructor
    does with a sampler (:func:`check`, and the tests of the hook)."""
    from torch_geometric.sampler import BaseSampler

    class Probe(BaseSampler):
        def sample_from_nodes(self, *args, **kwargs):
            raise NotImplementedError

        def sample_from_edges(self, *args, **kwargs):
            raise NotImplementedError
    return Probe()


def _check_loaders(version):
    import torch
    from torch_geometric import loader
    from torch_geometric.data import Data
    seen = []

    def hook(built, sampler):
        seen.append((built, sampler))
    problems = []
    data = Data(num_nodes=3, edge_index=torch.tensor([[0, 1], [1, 2]]))
    args = {"NodeLoader": {"input_nodes": torch.arange(3)},
            "LinkLoader": {"edge_label_index": torch.tensor([[0, 1], [1, 2]])}}
    after_loader_init(hook)
    try:
        for name, attr in _LOADERS:
            cls, probe = getattr(loader, name, None), probe_sampler()
            if cls is None:
                problems.append(f"{version}: torch_geometric.loader.{name} is gone; "
                                f"ddstore.pyg.workers checks the loaders built on it")
                continue
            seen.clear()
            try:
                built = cls(data, probe, batch_size=2, **args[name])
            except Exception as exc:  # noqa: BLE001 -- reported by name
                problems.append(f"{version}: {name}(data, sampler, ...) raised "
                                f"{type(exc).__name__}: {exc}")
                continue
            if getattr(built, attr, None) is not probe:
                problems.append(f"{version}: {name} no longer keeps its sampler in "
                                f"{name}.{attr}, where ddstore.pyg.workers finds it")
            if [s for b, s in seen if b is built] != [probe]:
                problems.append(f"{version}: building a {name} no longer runs "
                                f"{name}.__init__ once (wrapped by "
                                f"ddstore._pyg_seams.after_loader_init)")
            for a in ("num_workers", "multiprocessing_context"):
                if not hasattr(built, a):
                    problems.append(f"{version}: {name} has no DataLoader attribute "
                                    f"{a!r}, which ddstore.pyg.workers.check_loader reads")
    finally:
        _HOOKS.remove(hook)
    return problems


def _check_neighbor_loaders(version):
    from torch_geometric import loader
    problems = []
    for name in _NEIGHBOR_LOADERS:
        cls = getattr(loader, name, None)
        if cls is None:
            problems.append(f"{version}: torch_geometric.loader.{name} is gone; "
                            f"ddstore.pyg.loader_options reads its arguments")
            continue
        have = inspect.signature(cls.__init__).parameters
        missing = [a for a in _NEIGHBOR_ARGS if a not in have]
        if missing:
            problems.append(f"{version}: {name}.__init__ no longer takes {missing}, "
                            f"which ddstore.pyg.loader_options reads "
                            f"(ddstore._pyg_seams.before_neighbor_loader_init)")
    return problems
