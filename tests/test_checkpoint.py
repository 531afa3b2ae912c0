"""Checkpoint and restart of the store (issue 37): ``tests/mpi/checkpoint_core.py`` saves
on 1-4 ranks at every width and restores on every smaller rank count at every width,
comparing every byte; failures during save, damaged files and refusals (see its
docstring).  The in-process tests below check the one-rank rules and the file set."""
import json
import os

import numpy as np
import pytest

from conftest import on_ranks
from ddstore import DDStore, DDStoreValueError
from ddstore import checkpoint as ck


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport", [(1, "auto"), (2, "auto"), (3, "rma"),
                                              (4, "auto")])
@pytest.mark.shared_launch("checkpoint_core.py", "{transport}", timeout=300)
def test_checkpoint_core(shared_launch, nprocs, transport):
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch


def test_files_read_back_with_numpy_alone(store, tmp_path):
    """The module docstring's recipe reads every variable back without ddstore."""
    import math
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    store.add("x", x)
    store.save(tmp_path / "ck", block_bytes=40)
    path = str(tmp_path / "ck")
    m = json.load(open(f"{path}/ddstore-checkpoint.json"))
    v = m["variables"][0]
    rows = [np.fromfile(f"{path}/{m['files'][f]}", dtype=v["dtype"], offset=off,
                        count=n * math.prod(v["row_shape"]))
            for f, off, r0, n, h in v["blocks"]]
    assert np.concatenate(rows).tobytes() == x.tobytes()
    assert len(v["blocks"]) == 7 and v["nrows"] == 20 and m["nbytes"] == x.nbytes


def test_manifest_is_published_last(store, tmp_path, monkeypatch):
    """A save that fails before its rename leaves no manifest and no new files; the old
    checkpoint stays readable."""
    store.add("x", np.arange(5))
    path = tmp_path / "ck"
    store.save(path)
    before = sorted(os.listdir(path))

    def broken(path, manifest):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ck.CheckpointAPI, "_publish", staticmethod(broken))
    store.update("x", np.zeros(5, np.int64))
    with pytest.raises(Exception, match="No space left"):
        store.save(path)
    assert sorted(os.listdir(path)) == before
    monkeypatch.undo()
    from mpi4py import MPI
    with DDStore.restore(path, MPI.COMM_SELF) as r:
        assert (r.get_range("x", 0, 5) == np.arange(5)).all()


def test_save_under_a_file_named(store, tmp_path):
    """A save path that cannot be made names the file in its way (was the OS's bare
    NotADirectoryError); the file is left as it was."""
    store.add("x", np.arange(3))
    (tmp_path / "afile").write_text("keep")
    for path in (tmp_path / "afile" / "sub", tmp_path / "afile" / "a" / "b"):
        with pytest.raises(DDStoreValueError, match=f"save: {str(path)!r} cannot be made: "
                                                    f"{str(tmp_path / 'afile')!r} is a file"):
            store.save(path)
    assert (tmp_path / "afile").read_text() == "keep"


def test_read_manifest_refusals(tmp_path):
    with pytest.raises(DDStoreValueError, match="no checkpoint at"):
        ck.read_manifest(tmp_path)
    (tmp_path / ck.MANIFEST).write_text("{not json")
    with pytest.raises(DDStoreValueError, match="is not JSON"):
        ck.read_manifest(tmp_path)
    for version in (99, 2.0, 1.0, True, "2"):  # an integer field: 2.0 was taken as 2
        (tmp_path / ck.MANIFEST).write_text(json.dumps({"format": ck.FORMAT,
                                                        "version": version}))
        with pytest.raises(DDStoreValueError, match=f"format version {version!r};"):
            ck.read_manifest(tmp_path)


def test_cut_bounds():
    assert ck._cut_bounds(10, 3, [0, 2, 3, 9, 10], "v") == [0, 3, 9, 10]
    assert ck._cut_bounds(10, 2, [0, 10], "v") == [0, 0, 10]
    with pytest.raises(DDStoreValueError, match="cuts must rise from 0"):
        ck._cut_bounds(10, 2, [0, 5], "v")


@pytest.mark.mpi
def test_checkpoint_benchmark_smoke(tmp_path_factory):
    """bench.checkpoint on 20 MB of rows: save, restore at two widths, dd, every byte
    compared; the JSON names its rates and ratios."""
    from bench_job import bench_output
    out, tmp_path = bench_output("checkpoint", tmp_path_factory)
    assert "per rank: save" in out, out
    res = json.load(open(tmp_path / "checkpoint_rows_n2.json"))
    assert res["checked_every_byte"] is True
    for key in ("save", "restore_same_width", "restore_width_1", "dd_write", "dd_read",
                "first_touch"):
        assert res[key][0]["gb_per_s_per_rank"] > 0, key
    assert res["save_over_dd_write"] > 0 and res["command"].startswith("mpiexec -n 2")


def test_a_killed_save_leaves_nothing_that_blocks_the_next(store, tmp_path):
    """What a save killed before its rename leaves (a generation directory, a manifest
    not yet renamed) does not make the directory "other files"; the next save succeeds
    and removes it."""
    path = tmp_path / "ck"
    (path / "g-killed").mkdir(parents=True)  # as a killed save leaves it: marker first
    (path / "g-killed" / ".ddstore-generation").write_text(json.dumps(
        {"format": "ddstore-checkpoint-generation", "checkpoint": "0" * 32,
         "generation": "g-killed"}))
    (path / f".{ck.MANIFEST}.g-killed").write_text("{}")
    store.add("x", np.arange(3))
    m = store.save(path)
    assert sorted(os.listdir(path)) == sorted([ck.MANIFEST, m["generation"]])


def test_a_save_under_way_holds_its_directory(store, tmp_path):
    """A save claims its directory (an exclusive ``flock``): a second save to the same
    path at the same time (another job, another store) is refused naming it, and the
    first's checkpoint stays whole (both said they saved, and the second's clean-up had
    removed the first's published generation: no checkpoint left).  The claim is let go
    after each save, a refused one included, so the next save goes on."""
    import fcntl
    store.add("x", np.arange(12.0).reshape(6, 2))
    path = tmp_path / "ck"
    first = store.save(str(path))
    fd = os.open(path, os.O_RDONLY)  # another save, under way
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(DDStoreValueError, match=r"save: another save is writing to "
                                                    r".*ck' now \(another job, or another "
                                                    r"store of this one\)"):
            store.save(str(path))
    finally:
        os.close(fd)
    assert ck.read_manifest(str(path))["generation"] == first["generation"]
    assert sorted(os.listdir(path)) == sorted([ck.MANIFEST, first["generation"]])
    again = store.save(str(path))  # the claim let go: saved, the earlier one replaced
    assert sorted(os.listdir(path)) == sorted([ck.MANIFEST, again["generation"]])
    back = DDStore.restore(str(path), store.comm)
    assert back.get_range("x", 0, 6).tolist() == np.arange(12.0).reshape(6, 2).tolist()
    back.free()
    store.remove("x")
