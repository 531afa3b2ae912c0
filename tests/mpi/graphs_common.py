"""Sample generators and comparisons shared by the graph tests (MPI and pytest)."""
import numpy as np
import torch


def rich_sample(i):
    """Graph ``i`` with keys of every storable kind; graph 3 has no nodes and no edges."""
    rng = np.random.default_rng(1000 + i)
    n = 0 if i == 3 else int(rng.integers(1, 9))
    e = 0 if n == 0 else int(rng.integers(0, 12))
    from torch_geometric.data import Data
    d = Data()
    d.x = torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32))
    d.edge_index = torch.from_numpy(rng.integers(0, max(n, 1), (2, e)).astype(np.int64))
    d.edge_attr = torch.from_numpy(rng.standard_normal((e, 2)).astype(np.float16))
    d.pos = torch.from_numpy(rng.standard_normal((n, 3)))  # float64
    d.y = torch.tensor([float(i)], dtype=torch.float32)  # graph-level
    d.y_node = torch.from_numpy(rng.integers(-5, 5, n).astype(np.int32))  # node-level
    d.mask = torch.from_numpy(rng.random(n) < 0.5)  # bool
    d.energy = torch.tensor(float(i) * 0.5, dtype=torch.float64)  # 0-d tensor
    d.feat_np = rng.integers(0, 255, (n, 2, 2)).astype(np.uint8)  # numpy array
    d.score = np.float32(i / 7)  # numpy scalar
    d.label = int(i * 3 - 7)  # python int
    d.weight = float(i) / 3.0  # python float
    d.flag = bool(i % 2)  # python bool
    d.gid = torch.tensor([i], dtype=torch.int64)
    return d


def tensor_sample(i):
    """Graph ``i`` with only tensor keys (the fast ``Batch`` path); graph 5 is empty."""
    rng = np.random.default_rng(2000 + i)
    n = 0 if i == 5 else int(rng.integers(1, 7))
    e = 0 if n == 0 else int(rng.integers(0, 10))
    from torch_geometric.data import Data
    return Data(x=torch.from_numpy(rng.standard_normal((n, 2)).astype(np.float32)),
                edge_index=torch.from_numpy(rng.integers(0, max(n, 1), (2, e))),
                edge_attr=torch.from_numpy(rng.standard_normal((e, 1))),
                face=torch.from_numpy(rng.integers(0, max(n, 1), (3, 2)).astype(np.int32)),
                y=torch.tensor([[i, -i]], dtype=torch.float32),
                t=torch.tensor(i, dtype=torch.int16),
                gid=torch.tensor([i]))


def assert_value_equal(got, want, what):
    """Equal type, dtype, shape and values."""
    assert type(got) is type(want), f"{what}: type {type(got)} != {type(want)}"
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
        assert torch.equal(got, want), f"{what}: values differ"
    elif isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
        assert np.shape(got) == np.shape(want), f"{what}: shape differs"
        assert np.array_equal(got, want), f"{what}: values differ"
    else:
        assert got == want, f"{what}: {got!r} != {want!r}"


def assert_graph_equal(got, want, what):
    """Key by key equality of two ``Data`` (keys, types, dtypes, shapes, values)."""
    assert sorted(got.keys()) == sorted(want.keys()), \
        f"{what}: keys {sorted(got.keys())} != {sorted(want.keys())}"
    for key in want.keys():
        assert_value_equal(got[key], want[key], f"{what} key {key!r}")


def assert_batch_equal(got, want, what):
    """Two ``Batch`` objects with equal attributes and slice/increment tables."""
    assert sorted(got.keys()) == sorted(want.keys()), f"{what}: keys differ"
    for key in want.keys():
        a, b = got[key], want[key]
        if isinstance(b, torch.Tensor):
            assert_value_equal(a, b, f"{what} key {key!r}")
        else:
            assert list(a) == list(b), f"{what} key {key!r}"
    assert got.num_graphs == want.num_graphs
    for table in ("_slice_dict", "_inc_dict"):
        ga, wa = getattr(got, table), getattr(want, table)
        assert set(ga) == set(wa), f"{what}: {table} keys differ"
        for key in wa:
            if isinstance(wa[key], torch.Tensor):
                assert torch.equal(ga[key], wa[key]), f"{what}: {table}[{key!r}] differs"
            else:
                assert ga[key] == wa[key], f"{what}: {table}[{key!r}] differs"
