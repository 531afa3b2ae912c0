"""Tests of the pyddstore compatibility layer (MPI programs under mpiexec + timeout)."""
import pytest



@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.shared_launch("pyddstore_roundtrip.py", timeout=120)
def test_pyddstore_roundtrip(shared_launch, nprocs):
    from conftest import summary_of
    checks, failed, ranks = summary_of(shared_launch, "pyddstore_roundtrip")
    assert checks > 0 and failed == 0 and ranks == nprocs, shared_launch


def test_pyddstore_in_process_round_trip():
    """One process (COMM_SELF), no launcher: the original API's add / get / get_batch
    give back every byte written."""
    import numpy as np
    from mpi4py import MPI

    import pyddstore
    data = np.arange(60, dtype=np.float64).reshape(20, 3) * 0.5
    store = pyddstore.PyDDStore(MPI.COMM_SELF)
    try:
        store.add("x", data)
        store.epoch_begin()
        row = np.empty((1, 3))
        store.get("x", row, 7)
        assert row.tobytes() == data[7:8].tobytes()
        batch = np.empty((4, 3))
        store.get_batch("x", batch, [19, 0, 7, 0])
        assert batch.tobytes() == data[[19, 0, 7, 0]].tobytes()
        store.epoch_end()
        # removed through .store, then another 'x' added there: every call of this
        # object refuses the name as removed (variables() listed it, get refused it
        # while size read the new one)
        store.store.remove("x")
        assert store.variables() == []
        store.store.add("x", data[:2])
        from ddstore import DDStoreStateError
        for call in (lambda: store.get("x", row, 0), lambda: store.get_batch("x", row, [0]),
                     lambda: store.size("x"), lambda: store.info("x"),
                     lambda: store.update("x", row)):
            with pytest.raises(DDStoreStateError, match="'x'.* was removed"):
                call()
        store.store.remove("x")
        store.add("x", data[:4])  # added here again: read as any other
        store.get("x", row, 3)
        assert row.tobytes() == data[3:4].tobytes() and store.variables() == ["x"]
        assert store.size("x") == 4
    finally:
        store.free()
    from ddstore import DDStoreStateError
    for call in (store.epoch_begin, store.epoch_end):  # freed: said, as get's
        with pytest.raises(DDStoreStateError, match="freed"):
            call()


def test_pyddstore_arguments_as_the_original_takes_them():
    """Hostile round: an update offset that is not an integer is refused (1.5 wrote at
    row 1, "1" at row 1, None raised TypeError); a 0-d integer tensor is a start (the
    original's ``long start`` takes it); a bfloat16 tensor, an unhashable name and an
    index beyond int64 are named in ddstore errors (were TypeError / 'dtype object');
    an update outside the chunk is a ValueError too, as a get outside the rows is."""
    import numpy as np
    import pytest
    import torch
    from mpi4py import MPI

    import pyddstore
    from ddstore import DDStoreIndexError, DDStoreValueError
    data = np.arange(30, dtype=np.float32).reshape(10, 3)
    store = pyddstore.PyDDStore(MPI.COMM_SELF)
    try:
        store.add("x", data)
        store.init("f", 2, 3, 4)
        for bad in (1.5, "1", None):
            with pytest.raises(DDStoreValueError, match="offset must be an integer"):
                store.update("f", np.ones((1, 3), np.float32), bad)
        store.update("f", np.full((1, 3), 5, np.float32), torch.tensor(1))
        with pytest.raises(pyddstore.PyDDStoreRangeError, match=r"rows \[2, 3\)"):
            store.update("f", np.ones((1, 3), np.float32), 2)
        with pytest.raises(ValueError):
            store.update("f", np.ones((1, 3), np.float32), -1)
        store.epoch_begin()
        row = np.zeros((1, 3), np.float32)
        store.get("f", row, np.int64(1))
        assert row.tolist() == [[5, 5, 5]]
        store.get("x", row, torch.tensor(7))
        assert row.tobytes() == data[7:8].tobytes()
        with pytest.raises(DDStoreValueError, match="start must be an integer"):
            store.get("x", row, torch.tensor(7.0))
        with pytest.raises(DDStoreValueError, match="bfloat16 has no numpy equivalent"):
            store.get("x", torch.zeros(1, 3, dtype=torch.bfloat16), 0)
        with pytest.raises(DDStoreValueError, match="bfloat16"):
            store.add("bf", torch.zeros(2, 3, dtype=torch.bfloat16))
        with pytest.raises(DDStoreValueError, match=r"dtype datetime64\[ns\] cannot be "
                                                    r"stored; allowed: bool, integers, "
                                                    r".*arr.view\(np.int64\)"):
            store.add("dt", np.zeros((2, 3), "datetime64[ns]"))
        with pytest.raises(DDStoreValueError, match=r"unknown variable \['x'\]"):
            store.get(["x"], row, 0)
        # another byte order (the original: NotImplementedError): refused, never swapped
        swapped = data.astype(">f4")
        for call in (lambda: store.add("be", swapped), lambda: store.update("f", swapped[:1]),
                     lambda: store.get("x", np.zeros((1, 3), ">f4"), 0),
                     lambda: store.get_batch("x", np.zeros((1, 3), ">f4"), [0])):
            with pytest.raises(DDStoreValueError, match=r">f4 is not in this machine's "
                                                        r"byte order; use arr.astype\('<f4'\)"):
                call()
        assert "be" not in store.variables()
        # arguments of another type: TypeError too, as the original's typed signatures
        for call in (lambda: store.get(["x"], row, 0), lambda: store.get(3, row, 0),
                     lambda: store.get("x", row, 1.5), lambda: store.get("x", [0.0], 0),
                     lambda: store.update("f", row, None), lambda: store.init("g", 2.0, 3),
                     lambda: store.add("h", "not an array")):
            with pytest.raises(TypeError) as info:
                call()
            assert isinstance(info.value, pyddstore.PyDDStoreTypeError) and \
                isinstance(info.value, DDStoreValueError), info.value
        with pytest.raises(DDStoreValueError) as info:  # a value out of range: no TypeError
            store.init("g", -1, 3)
        assert not isinstance(info.value, TypeError)
        for call in (lambda: store.add(1, data), lambda: store.init(None, 2, 3),
                     lambda: store.get_batch("x", row, [0.0]),
                     lambda: store.get_batch("x", row, np.array([True])),
                     lambda: pyddstore.PyDDStore(5)):
            with pytest.raises(pyddstore.PyDDStoreTypeError):
                call()
        store.init("t", torch.tensor(2), np.int64(3), torch.tensor(4))  # as update's offset
        assert store.size("t") == 2
        # a buffer whose bytes are not numbers: refused on the fast path too (an object
        # array was filled with raw bytes as pointers: a crash when read; unicode filled)
        store.add("d", data.astype(np.float64))  # object pointers: 8 bytes, as float64
        for var, bad in (("d", np.empty((1, 3), object)), ("x", np.empty((1, 3), "<U1"))):
            for call in (lambda: store.get(var, bad, 0),
                         lambda: store.get_batch(var, bad, [0])):
                with pytest.raises(DDStoreValueError, match="cannot be stored"):
                    call()
        with pytest.raises(DDStoreValueError, match=r"unknown variable \['x'\]"):
            store.get_batch(["x"], row, [0])
        with pytest.raises(pyddstore.PyDDStoreRangeError,
                           match=r"index 18446744073709551616 \(position 0\) out of range"):
            store.get_batch("x", row, [2 ** 64])
        # rows out of range name the variable (not the store's handle the module reads
        # through), whichever call, and a numpy int64 start (HydraGNN's) too
        n = store.size("x")
        for call, message in (
                (lambda: store.get("x", row, np.int64(n)), rf"get 'x': rows \[{n}, "),
                (lambda: store.get_batch("x", row, [n]), rf"get_batch 'x': index {n} "),
                (lambda: store.get_batch("x", row, np.array([n])),
                 rf"get_batch 'x': index {n} "),
                (lambda: store.update("f", row, 99), r"update 'f': rows \[99, 100\) "
                                                     r"outside the local chunk")):
            with pytest.raises(pyddstore.PyDDStoreRangeError, match="^" + message):
                call()
        store.get("x", row, np.int64(n - 1))
        assert np.array_equal(row, data[n - 1:n].reshape(row.shape))
        assert isinstance(pyddstore.PyDDStoreRangeError("e"), DDStoreIndexError)
        # a tensor with torch's lazy conj / neg bit (numpy cannot see its values: a bare
        # RuntimeError from get) and a sparse one (told as "not contiguous"): named
        store.add("z", np.zeros((4, 3), np.complex64))
        lazy = torch.zeros(2, 3, dtype=torch.complex64)
        for view, bit in ((lazy.conj(), "conj"), (lazy.conj().imag, "neg")):
            for call in (lambda: store.get("z", view, 0),
                         lambda: store.get_batch("z", view, [0, 1])):
                with pytest.raises(DDStoreValueError, match=rf"lazy {bit} bit set; give "
                                                            rf"x.resolve_{bit}\(\)"):
                    call()
        with pytest.raises(DDStoreValueError, match=r"sparse.*x.to_dense\(\)"):
            store.get("x", torch.zeros(1, 3).to_sparse(), 0)
        store.epoch_end()
    finally:
        store.free()
    # not a communicator one can use: named (MPI_Ibarrier on COMM_NULL raised a bare
    # mpi4py error), under either argument name
    for kwargs in ({"comm": MPI.COMM_NULL}, {"comm_or_none": MPI.COMM_NULL}):
        with pytest.raises(DDStoreValueError, match=r"PyDDStore: comm must be an mpi4py "
                                                    r"intracommunicator"):
            pyddstore.PyDDStore(**kwargs)


def test_pyddstore_epochs_balanced_as_the_original():
    """Once the store holds a variable, an epoch opened twice or closed unopened raises
    DDStoreStateError (a RuntimeError: the original's "Fence already activated" / "Fence
    is not activated"); before, the pair does nothing, as the original's loop over no
    window; a store of one node's ranks has free epochs (no round: reads_wait False)."""
    import numpy as np
    from mpi4py import MPI

    import pyddstore
    from ddstore import DDStoreStateError
    with pyddstore.PyDDStore(MPI.COMM_SELF) as store:
        assert store.store.reads_wait is False
        store.epoch_begin()
        store.epoch_begin()  # no variable: nothing to fence
        store.epoch_end()
        store.add("x", np.ones((4, 2)))
        with pytest.raises(DDStoreStateError, match="no epoch is open"):
            store.epoch_end()
        store.epoch_begin()
        with pytest.raises(RuntimeError, match="an epoch is open already"):
            store.epoch_begin()
        store.epoch_end()
        store.epoch_begin()
        store.epoch_end()
    # an epoch begun before the first variable opened none (as the original's fences,
    # one per variable): its end says so (it said epoch_begin had not been called)
    with pyddstore.PyDDStore(MPI.COMM_SELF) as store:
        store.epoch_begin()
        store.add("x", np.ones((4, 2)))
        with pytest.raises(DDStoreStateError, match="epoch_begin was called before the "
                                                    "store held a variable"):
            store.epoch_end()
        store.epoch_begin()
        store.epoch_end()


def test_pyddstore_newer_originals_calls(monkeypatch):
    """The calls a newer upstream PyDDStore added, as it behaves at method 0: the
    constructor's ``comm_or_none`` / ``handshake_dir`` / ``n_core`` / ``nic_map``;
    ``register_recv`` keeps a buffer alive (an empty one ignored, an unknown name
    refused) and ``unregister_recv`` lets it go (an unregistered one ignored);
    ``get_profile`` gives zero libfabric counters and, under DDSTORE_PROFILE, counts
    the gets; ``join`` is a RuntimeError on a store made with a communicator."""
    import numpy as np
    from mpi4py import MPI
    import pyddstore
    from ddstore import DDStoreValueError
    monkeypatch.setenv("DDSTORE_PROFILE", "1")
    s = pyddstore.PyDDStore(comm_or_none=MPI.COMM_SELF, method=0, handshake_dir="",
                            n_core=0, nic_map=None)
    x = np.arange(12.0).reshape(6, 2)
    s.add("x", x)
    buf = np.zeros((2, 2))
    s.get("x", buf, 1)
    s.get_batch("x", buf, [5, 0])
    assert buf.tolist() == [x[5].tolist(), x[0].tolist()]
    prof = s.get_profile("x")
    assert prof["py_gets"] == 2 and prof["py_get"] > 0 and prof["py_sync"] == 0.0
    assert all(prof[k] == 0 for k in ("calls", "lock_wait", "mr", "mr_miss", "read", "cq",
                                      "rows")), prof
    s.register_recv("x", buf)
    s.register_recv("nope", np.zeros((0, 2)))  # empty: ignored, as the original
    with pytest.raises(DDStoreValueError, match="unknown variable 'nope'"):
        s.register_recv("nope", buf)
    assert list(s._recv.values()) == [buf]
    s.unregister_recv("x", buf)
    s.unregister_recv("x", buf)  # not registered: ignored at method 0
    assert not s._recv
    with pytest.raises(RuntimeError, match=r"join\('x'\) is only valid for the extra "
                                           r"members of the original's method 2"):
        s.join("x")
    with pytest.raises(TypeError, match="comm given twice"):
        pyddstore.PyDDStore(MPI.COMM_SELF, comm_or_none=MPI.COMM_SELF)
    # (an array as the first: told as given twice, not numpy's ambiguous truth value)
    with pytest.raises(TypeError, match="comm given twice"):
        pyddstore.PyDDStore(np.array([1, 2]), comm_or_none=MPI.COMM_SELF)
    with pytest.raises(TypeError, match="handshake_dir must be a str"):
        pyddstore.PyDDStore(MPI.COMM_SELF, handshake_dir=None)
    s.free()
    monkeypatch.delenv("DDSTORE_PROFILE")
    plain = pyddstore.PyDDStore(MPI.COMM_SELF)  # not profiling: the class's own methods
    assert "get" not in vars(plain) and plain.get_profile.__self__ is plain
    plain.add("y", x)
    plain.get("y", buf, 0)
    assert plain.get_profile("y")["py_gets"] == 0
    plain.free()
