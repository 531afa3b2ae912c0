"""Random graphs that several tests build the same way (the MPI programs of ddstore.pyg
and the in-process tests, which import this module through conftest's ``sys.path``).

Every builder draws from the ``torch.Generator`` it is given, in a fixed order, so the
same seed gives the same graph wherever it is built."""
import torch
from torch_geometric.data import HeteroData


def random_edges(g, num_src, num_dst, m):
    """``[2, m]`` int64 edge index: sources uniform in ``[0, num_src)``, then
    destinations uniform in ``[0, num_dst)``, drawn from ``g``."""
    return torch.stack([torch.randint(0, num_src, (m,), generator=g),
                        torch.randint(0, num_dst, (m,), generator=g)])


def two_type_graph(g, num_a, num_b, m, edge_type, features=2):
    """A ``HeteroData`` of node types ``"a"`` (``num_a`` nodes) and ``"b"`` (``num_b``),
    each with a standard-normal ``x`` of ``features`` columns, and ``m`` random edges of
    ``edge_type`` (``("a", <relation>, "b")``), drawn from ``g`` in that order."""
    h = HeteroData()
    h["a"].x = torch.randn(num_a, features, generator=g)
    h["b"].x = torch.randn(num_b, features, generator=g)
    h[edge_type].edge_index = random_edges(g, num_a, num_b, m)
    return h
