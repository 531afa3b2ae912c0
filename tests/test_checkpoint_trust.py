"""A checkpoint never trusted blindly, the user's files never touched (issue 43, items
1-3 and the full disk of item 11).  In process, on one rank: a save removes only the
generations it marked and refuses a directory holding anything else; the manifest's
checksum (verified here with the ``xxhash`` package alone, as docs/cluster.md says) and
its fields, each edit refused naming the field and the file; a FIFO or ``/dev/zero`` as
manifest refused without waiting; ``load`` all or nothing; a full disk names the file.
``tests/mpi/checkpoint_trust.py`` runs the cases that need two ranks (two stores saved
to one path, a save refused in its first round)."""
import errno
import json
import os
import re
import shutil
import signal

import numpy as np
import pytest
import xxhash

from conftest import on_ranks
from ddstore import DDStore, DDStoreError, DDStoreOSError, DDStoreValueError
from ddstore import checkpoint as ck


@pytest.fixture(autouse=True)
def _no_hang():
    """Every test here ends within 60 s (a FIFO read would wait for ever)."""
    def alarm(signum, frame):
        raise TimeoutError("the test waited more than 60 s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def restore(path):
    from mpi4py import MPI
    return DDStore.restore(path, MPI.COMM_SELF, width=1)


def saved(store, path):
    """``x`` (3 rows of 2 float64), records ``r`` and an annotated object, saved."""
    store.add("x", np.arange(6, dtype=np.float64).reshape(3, 2))
    store.add("y", np.arange(4, dtype=np.float32))
    store.add_records("r", [{"k": np.ones((i + 1, 2), np.int32)} for i in range(3)])
    store.annotate("obj", "Test", {"n": 1, "what": "x"}, {"cut": np.array([0, 1, 3])},
                   variables=["x"], cuts={"x": "cut"})
    return store.save(path)


def raw_of(path):
    with open(os.path.join(path, ck.MANIFEST), "rb") as f:
        return f.read()


def sign(raw):
    """The documented checksum, computed with xxhash alone: the file's bytes with the
    16 hex digits after '{"manifest_xxh64":"' replaced by zeros, seed 0x64647374."""
    assert raw.startswith(b'{"manifest_xxh64":"') and raw[35:36] == b'"'
    h = xxhash.xxh64_intdigest(raw[:19] + b"0" * 16 + raw[35:], seed=0x64647374)
    return raw[:19] + b"%016x" % h + raw[35:]


def edit(path, change, resign):
    """Rewrite the manifest with ``change(manifest)`` applied, its checksum recomputed
    (``resign``) or left as it was."""
    raw = raw_of(path)
    m = json.loads(raw)
    change(m)
    new = json.dumps(m, separators=(",", ":")).encode()
    new = sign(new) if resign else new[:19] + raw[19:35] + new[35:]
    with open(os.path.join(path, ck.MANIFEST), "wb") as f:
        f.write(new)


# --------------------------------------------------------------- item 1: user files
def test_what_a_killed_removal_leaves_is_removed_by_the_next_save(store, tmp_path):
    """Left by a job killed while a save removed a generation: a version-1 generation's
    rank files (it has no marker) beside a checkpoint; a failed first save's own
    generation (no manifest yet: its marker's id is the checkpoint's).  The next save
    takes each as its own (the second was refused: the id was guessed from ``g-``
    entries only) and removes it; a file of the user's under that name stays."""
    store.add("x", np.arange(6))
    d = tmp_path / "d"
    kept = store.save(d)["generation"]
    v1 = d / (ck._REMOVING + "g-20260101T000000-0123abcd")
    v1.mkdir()
    (v1 / "rank-00000.bin").write_bytes(b"x" * 8)
    gen = store.save(d)["generation"]
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, gen]) and gen != kept
    e = tmp_path / "e"
    first = ck._REMOVING + "g-20260101T000000-4567cdef"
    (e / first).mkdir(parents=True)
    (e / first / ck._MARKER).write_text(json.dumps(
        {"format": ck._MARKER_FORMAT, "checkpoint": "ab" * 16, "generation": first[
            len(ck._REMOVING):]}))
    (e / first / "rank-00000.bin").write_bytes(b"y" * 8)
    m = store.save(e)
    assert sorted(os.listdir(e)) == sorted([ck.MANIFEST, m["generation"]])
    assert m["checkpoint"] == "ab" * 16  # (the killed first save's id, taken on)
    (e / first).mkdir()
    (e / first / "keep.txt").write_text("keep")
    with pytest.raises(DDStoreValueError, match="holds other files"):
        store.save(e)
    assert (e / first / "keep.txt").read_text() == "keep"


@pytest.mark.parametrize("stop", ["after the rank file", "before the rmdir"])
def test_a_save_killed_while_removing_the_old_generation_is_cleaned_next(
        store, tmp_path, monkeypatch, stop):
    """A job killed (a time limit, ``scancel``) while its save removed the previous
    generation left part of it (its marker gone first: the next saves were refused,
    naming files ddstore wrote).  The generation is renamed aside first and its marker
    removed last: whatever a kill leaves of it (marker and some rank files, or an empty
    directory) the next save knows as its own and removes; one holding a file of the
    user's is refused and kept."""
    d = tmp_path / "d"
    store.add("x", np.arange(6))
    first = store.save(d)["generation"]
    removed = []
    real_remove, real_rmdir = ck._remove_quietly, os.rmdir

    def remove(name):  # a kill after the first removal of the old generation's
        if removed and stop == "after the rank file":
            return
        removed.append(name)
        real_remove(name)
    monkeypatch.setattr(ck, "_remove_quietly", remove)
    if stop == "before the rmdir":
        monkeypatch.setattr(ck.os, "rmdir", lambda path: None)
    second = store.save(d)["generation"]
    monkeypatch.setattr(ck, "_remove_quietly", real_remove)
    monkeypatch.setattr(ck.os, "rmdir", real_rmdir)
    left = ck._REMOVING + first
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, second, left])
    assert os.path.basename(removed[0]).startswith("rank-")  # (the marker last)
    third = store.save(d)["generation"]
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, third])
    with DDStore.restore(d, store.comm) as back:
        assert back.get_range("x", 0, 6).tolist() == list(range(6))
    # what is not ours in such a directory stays, and the save says so
    (d / (ck._REMOVING + second)).mkdir()
    (d / (ck._REMOVING + second) / "keep.txt").write_text("keep")
    with pytest.raises(DDStoreValueError, match="holds other files"):
        store.save(d)
    assert (d / (ck._REMOVING + second) / "keep.txt").read_text() == "keep"


def test_save_refuses_a_users_g_directory_and_keeps_it(store, tmp_path):
    """The issue's case: ``g-results/keep.txt`` in the target; the save is refused
    naming it, before anything is written; the file is still there."""
    d = tmp_path / "d"
    (d / "g-results").mkdir(parents=True)
    (d / "g-results" / "keep.txt").write_text("keep")
    store.add("x", np.arange(3))
    with pytest.raises(DDStoreValueError, match="holds other files") as e:
        store.save(d)
    assert "'g-results'" in str(e.value) and "removes only what it wrote" in str(e.value)
    assert sorted(os.listdir(d)) == ["g-results"]
    assert (d / "g-results" / "keep.txt").read_text() == "keep"
    # beside a checkpoint of ours as well
    e2 = tmp_path / "e"
    m = store.save(e2)
    (e2 / "g-results").mkdir()
    (e2 / "g-results" / "keep.txt").write_text("keep")
    (e2 / "notes.txt").write_text("mine")
    with pytest.raises(DDStoreValueError, match="'g-results', 'notes.txt'"):
        store.save(e2)
    assert sorted(os.listdir(e2)) == sorted([ck.MANIFEST, m["generation"], "g-results",
                                             "notes.txt"])
    assert (e2 / "g-results" / "keep.txt").read_text() == "keep"


def test_only_our_marked_generations_are_removed(store, tmp_path):
    """A save replaces its own earlier generation (marked with its checkpoint id); a
    generation marked with another checkpoint's id is not ours: refused, kept."""
    d = tmp_path / "d"
    store.add("x", np.arange(3))
    m1 = store.save(d)
    marker = json.loads((d / m1["generation"] / ".ddstore-generation").read_text())
    assert marker == {"format": "ddstore-checkpoint-generation",
                      "checkpoint": m1["checkpoint"], "generation": m1["generation"]}
    m2 = store.save(d)
    assert m2["checkpoint"] == m1["checkpoint"]
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, m2["generation"]])
    other = d / "g-other"  # another checkpoint's generation, copied here
    other.mkdir()
    (other / ".ddstore-generation").write_text(json.dumps(
        {"format": "ddstore-checkpoint-generation", "checkpoint": "f" * 32,
         "generation": "g-other"}))
    with pytest.raises(DDStoreValueError, match="'g-other'"):
        store.save(d)
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, m2["generation"], "g-other"])


def test_a_users_file_inside_a_generation_of_ours_is_kept(store, tmp_path):
    """A file the user put inside a generation of ours (its marker names this
    checkpoint): the next save is refused naming it, and the file stays (the generation
    was removed with it)."""
    d = tmp_path / "d"
    store.add("x", np.arange(3))
    m1 = store.save(d)
    gen = d / m1["generation"]
    (gen / "my-notes.txt").write_text("mine")
    (gen / "results").mkdir()
    with pytest.raises(DDStoreValueError, match="holds other files") as e:
        store.save(d)
    assert f"'{m1['generation']}/my-notes.txt', '{m1['generation']}/results'" in \
        str(e.value)
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, m1["generation"]])
    assert (gen / "my-notes.txt").read_text() == "mine"
    (gen / "my-notes.txt").unlink()
    (gen / "results").rmdir()
    m2 = store.save(d)  # as the save left it: replaced as before
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, m2["generation"]])


def test_a_failed_save_removes_the_directories_it_made(store, tmp_path, monkeypatch):
    """A save into a new nested path that fails removes every directory it made (only
    the deepest was removed), not the one that was there."""
    store.add("x", np.arange(3))
    monkeypatch.setattr(ck.Checkpoints, "_write_part", lambda *a: 1 / 0)
    with pytest.raises(DDStoreError, match="ZeroDivisionError"):
        store.save(tmp_path / "a" / "b" / "c")
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    store.save(os.path.join(tmp_path, "d", "e", ".."))  # made as os.makedirs makes it
    assert sorted(os.listdir(tmp_path / "d")) == sorted(
        ["e", ck.MANIFEST, ck.read_manifest(tmp_path / "d")["generation"]])


def test_a_failed_directory_sync_says_the_checkpoint_is_in_place(store, tmp_path,
                                                                  monkeypatch):
    """A failed sync of the directory after the rename: the error says that the new
    checkpoint is in place, and the earlier generation is kept beside it."""
    d = tmp_path / "d"
    store.add("x", np.arange(3))
    m1 = store.save(d)
    store.update("x", [7, 8, 9])
    store.sync()
    real = os.fsync

    def fsync(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)
    monkeypatch.setattr(ck.os, "fsync", fsync)
    with pytest.raises(DDStoreError, match="the new checkpoint is in place .* syncing "
                                           "the directory failed") as e:
        store.save(d)
    monkeypatch.undo()
    m2 = ck.read_manifest(d)
    assert m2["generation"] in str(e.value) and m2["generation"] != m1["generation"]
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, m1["generation"],
                                            m2["generation"]])
    with restore(d) as r:
        assert r.get_range("x", 0, 3).tolist() == [7, 8, 9]


def test_annotation_arrays_of_one_checkpoint_key_are_refused(store, tmp_path):
    """Arrays of two annotations that a checkpoint would keep under one key
    ('annotation:a:b:c') are refused at annotate (the save kept one, and the checkpoint
    could never be restored)."""
    store.add("x", np.arange(3))
    store.annotate("a:b", "T", arrays={"c": np.arange(2)})
    with pytest.raises(DDStoreValueError, match=r"annotate 'a': its array 'b:c' and array "
                                                r"'c' of annotation 'a:b' would be one"):
        store.annotate("a", "T", arrays={"b:c": np.arange(3)})
    store.annotate("a:b", "T", arrays={"c": np.arange(4)})  # replacing itself: fine
    store.annotate("a", "T", arrays={"b": np.arange(3)})
    store.save(tmp_path / "d")
    with restore(tmp_path / "d") as r:
        assert r.annotation("a:b").arrays["c"].tolist() == [0, 1, 2, 3]
        assert r.annotation("a").arrays["b"].tolist() == [0, 1, 2]


def test_what_a_checkpoint_could_not_restore_is_refused_when_made(store, tmp_path):
    """Saved but never restorable, each of these (thirty-first session): an annotation
    array under an empty key, of a dtype the manifest cannot name (structured, a record
    array, items of no bytes) or that replicas of equal values hold differently (long
    double), are refused at annotate; rows of 63 dimensions and annotation arrays of
    64 (numpy's most) are restored (the manifest took 32); a save path holding a NUL is
    refused before any directory is made (a ValueError escaped the clean-up on one rank,
    and the parent it made was left)."""
    store.add("x", np.arange(3))
    bad = {"": np.zeros(2), "v0": np.empty(2, "V0"),
           "st": np.zeros(2, [("a", "i4"), ("b", "f8")]),
           "rec": np.rec.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
           "ld": np.zeros(2, np.longdouble)}
    words = {"": "non-empty str", "v0": "items of no bytes", "st": "a structured",
             "rec": "a structured", "ld": "long double"}
    for key, arr in bad.items():
        with pytest.raises(DDStoreValueError, match=f"annotate 'o'.*{words[key]}"):
            store.annotate("o", "T", arrays={key: arr})
    store.add("d63", np.arange(2, dtype=np.int8).reshape((2,) + (1,) * 63))
    store.annotate("o", "T", arrays={"a64": np.arange(2.0).reshape((2,) + (1,) * 63),
                                     "u": np.array(["ab", "c"]), "t": np.zeros(2, "M8[s]")})
    store.save(tmp_path / "d")
    with restore(tmp_path / "d") as r:
        assert r.get_range("d63", 0, 2).tobytes() == bytes([0, 1])
        assert r.get("d63", 1).shape == (1,) * 63
        a = r.annotation("o").arrays
        assert a["a64"].shape == (2,) + (1,) * 63 and a["u"].tolist() == ["ab", "c"]
    parent = tmp_path / "new"
    with pytest.raises(DDStoreValueError, match=r"holds a NUL character; allowed: a "
                                                r"directory name without one"):
        store.save(str(parent / "a\0b"))
    assert not parent.exists()


def test_a_failed_manifest_write_leaves_no_temporary_and_names_the_file(
        store, tmp_path, monkeypatch):
    """Item 11: a full disk while writing the manifest: the error names the file, the
    temporary manifest and the new generation are gone, the old checkpoint reads."""
    d = tmp_path / "d"
    store.add("x", np.arange(3))
    m1 = store.save(d)
    real, calls = os.write, []

    def full(fd, data):  # the marker's write goes through, the manifest's fails
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(ck.os, "write", full)
    with pytest.raises(DDStoreError, match="No space left on device") as e:
        store.save(d)
    monkeypatch.undo()
    assert f".{ck.MANIFEST}.g-" in str(e.value) and str(d) in str(e.value)
    assert sorted(os.listdir(d)) == sorted([ck.MANIFEST, m1["generation"]])
    with restore(d) as r:
        assert r.get_range("x", 0, 3).tolist() == [0, 1, 2]


def test_a_full_disk_names_the_rank_file(store, tmp_path, monkeypatch):
    """Item 11: "No space left on device" names the file being written."""
    d = tmp_path / "d"
    store.add("x", np.arange(3))
    real_init = ck._Writer.__init__

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    def init(self, name, block_bytes):
        real_init(self, name, block_bytes)
        self.f = Full(self.f)
    monkeypatch.setattr(ck._Writer, "__init__", init)
    with pytest.raises(DDStoreError, match="No space left on device") as e:
        store.save(d)
    assert "rank-00000.bin" in str(e.value) and str(d) in str(e.value), str(e.value)
    # an OSError, what code that handles a full disk catches (it was a ValueError alone),
    # and still a DDStoreValueError as every failure of a call
    assert isinstance(e.value, DDStoreOSError) and isinstance(e.value, OSError)
    assert isinstance(e.value, DDStoreValueError)
    assert not d.exists()  # the directory it made, emptied and removed


def test_a_version_1_checkpoint_is_read_and_replaced(store, tmp_path):
    """A checkpoint of format version 1 (no checksum, no marker) is read with every
    field checked; a save into it replaces its generation (rank files only)."""
    d = tmp_path / "d"
    saved(store, d)
    m = json.loads(raw_of(d))
    old = m["generation"]
    os.remove(d / old / ".ddstore-generation")
    for k in ("manifest_xxh64", "checkpoint"):
        del m[k]
    m["version"] = 1
    (d / ck.MANIFEST).write_text(json.dumps(m))
    with restore(d) as r:
        assert r.get_range("x", 0, 3).tobytes() == \
            np.arange(6, dtype=np.float64).tobytes()
    m2 = store.save(d)
    assert m2["version"] == 2 and sorted(os.listdir(d)) == \
        sorted([ck.MANIFEST, m2["generation"]])


# --------------------------------------------------------------- item 2: the manifest
def test_the_documented_checksum_is_what_save_writes(store, tmp_path):
    d = tmp_path / "d"
    m = saved(store, d)
    raw = raw_of(d)
    assert sign(raw) == raw
    assert int(m["manifest_xxh64"], 16) == ck.manifest_checksum(raw)
    assert ck.read_manifest(d)["manifest_xxh64"] == m["manifest_xxh64"]


UNSIGNED = [  # the edits: each fails the checksum
    ("dtype <f8 -> <i8", lambda m: m["variables"][0].update(dtype="<i8")),
    ("dtype <f4 -> <i4", lambda m: m["variables"][1].update(dtype="<i4")),
    ("nrows 3 -> 2", lambda m: m["variables"][0].update(nrows=2)),
    ("row_shape [2] -> [1, 2]", lambda m: m["variables"][0].update(row_shape=[1, 2])),
    ("annotation meta", lambda m: m["annotations"][0]["meta"].update(n=2)),
]


def test_a_version_lowered_to_1_is_refused(store, tmp_path):
    """Version 1 had no checksum: a version-2 manifest whose version was edited to 1
    (which skipped the checksum, so a same-size dtype edit loaded float bits as int64)
    is refused naming the field."""
    d = tmp_path / "d"
    saved(store, d)
    edit(d, lambda m: m.update(version=1) or m["variables"][0].update(dtype="<i8"),
         resign=False)
    with pytest.raises(DDStoreValueError, match="field version: it says 1, but the "
                                                "manifest has fields version 1 never had"):
        restore(d)
    # relabelled whole: the checksum field removed too, then the checkpoint id: the
    # id, then the generation's marker, tell it from a version-1 save
    saved_again = tmp_path / "e"
    for drop, match in ((("manifest_xxh64",), "fields version 1 never had"),
                        (("manifest_xxh64", "checkpoint"), "its generation holds "
                                                           "'.ddstore-generation'")):
        store.save(saved_again)
        m = json.loads(raw_of(saved_again))
        for k in drop:
            del m[k]
        m.update(version=1)
        m["variables"][0].update(dtype="<i8")
        with open(os.path.join(saved_again, ck.MANIFEST), "w") as f:
            json.dump(m, f)
        with pytest.raises(DDStoreValueError, match=match):
            restore(saved_again)
        os.remove(os.path.join(saved_again, ck.MANIFEST))


@pytest.mark.parametrize("what,change", UNSIGNED, ids=[u[0] for u in UNSIGNED])
def test_an_edited_manifest_fails_its_checksum(store, tmp_path, what, change):
    d = tmp_path / "d"
    saved(store, d)
    assert [v["name"] for v in json.loads(raw_of(d))["variables"]][:2] == ["x", "y"]
    edit(d, change, resign=False)
    with pytest.raises(DDStoreValueError, match="fails its checksum") as e:
        restore(d)
    assert os.path.join(str(d), ck.MANIFEST) in str(e.value)
    assert "manifest_xxh64" in str(e.value)


def _block(k, value):
    def change(m):
        m["variables"][0]["blocks"][0][k] = value
    return change


SIGNED = [  # edits with the checksum made again: each refused naming its field
    ("dtype", lambda m: m["variables"][0].update(dtype="<x9"),
     "variables[0] ('x').dtype must be a numpy dtype string"),
    ("dtype object", lambda m: m["variables"][0].update(dtype="|O"),
     "variables[0] ('x').dtype"),
    ("dtype itemsize", lambda m: m["variables"][0].update(dtype="<f4"),
     "nbytes is 112 but the variables hold 88 bytes"),
    ("dtype itemsize and nbytes", lambda m: m.update(nbytes=88) or
     m["variables"][0].update(dtype="<f4"),
     "but variables[0] ('x').blocks[0] ends at byte 24"),
    ("dtype not a string", lambda m: m["variables"][0].update(dtype=8),
     "variables[0] ('x').dtype must be a non-empty string"),
    ("nrows", lambda m: m["variables"][0].update(nrows=2),
     "variables[0] ('x').nrows is 2 but its blocks hold 3 rows"),
    ("nrows negative", lambda m: m["variables"][0].update(nrows=-3),
     "variables[0] ('x').nrows must be an integer in [0,"),
    ("row_shape", lambda m: m["variables"][0].update(row_shape=[3]),
     "nbytes is 112 but the variables hold 136 bytes"),
    ("row_shape and nbytes", lambda m: m.update(nbytes=136) or
     m["variables"][0].update(row_shape=[3]),
     "but variables[0] ('x').blocks[0] ends at byte 72"),
    ("row_shape negative", lambda m: m["variables"][0].update(row_shape=[-2]),
     "variables[0] ('x').row_shape[0]"),
    ("row_shape string", lambda m: m["variables"][0].update(row_shape="2"),
     "variables[0] ('x').row_shape must be a list"),
    ("offset negative", _block(1, -1), "variables[0] ('x').blocks[0][1] (offset)"),
    ("file index", _block(0, 7), "variables[0] ('x').blocks[0][0] (file)"),
    ("first row", _block(2, 1), "variables[0] ('x').blocks[0][2] (first row)"),
    ("annotation meta", lambda m: m["annotations"][0].update(meta=[1]),
     "annotations[0] ('obj').meta must be an object"),
    ("annotation array", lambda m: m["annotations"][0].update(arrays=["cut", "gone"]),
     "annotations[0] ('obj').arrays[1] names array 'gone'"),
    ("annotation variable", lambda m: m["annotations"][0].update(variables=["zz"]),
     "annotations[0] ('obj').variables[0] names 'zz'"),
    ("nbytes", lambda m: m.update(nbytes="x"), "nbytes must be an integer"),
    ("files outside", lambda m: m.update(files=["../../etc/passwd"]),
     "files[0] must be"),
    ("generation", lambda m: m.update(generation="../x"), "generation must be"),
    ("variables", lambda m: m.update(variables={}), "variables must be a list"),
    ("variable entry", lambda m: m["variables"].__setitem__(0, "x"),
     "variables[0].name is missing"),
    ("records sizes", lambda m: m["arrays"]["records:r"].update(shape=[3, 2]),
     "arrays['records:r'] must be int64 of shape [records, 1]"),
    ("saved_by", lambda m: m["saved_by"].update(size=0), "saved_by.size"),
]


@pytest.mark.parametrize("what,change,words", SIGNED, ids=[s[0] for s in SIGNED])
def test_a_bad_field_is_refused_naming_it_and_nothing_is_loaded(store, tmp_path, what,
                                                                change, words):
    d = tmp_path / "d"
    saved(store, d)
    edit(d, change, resign=True)
    with pytest.raises(DDStoreValueError) as e:
        restore(d)
    msg = str(e.value)
    assert words in msg and os.path.join(str(d), ck.MANIFEST) in msg, msg
    # load into a store that exists: refused, nothing of the checkpoint left behind
    store.remove("x", "y", "r")
    before = store.variables()
    with pytest.raises(DDStoreValueError, match="field"):
        store.load(d)
    assert store.variables() == before and store.annotations() == []


def test_a_re_signed_same_size_dtype_change_is_what_a_checksum_cannot_catch(store,
                                                                            tmp_path):
    """Documented limit: an edit made with its checksum recomputed that keeps every
    size (<f8 -> <i8) is read as written; the checksum catches edits by anyone else."""
    d = tmp_path / "d"
    saved(store, d)
    edit(d, lambda m: m["variables"][0].update(dtype="<i8"), resign=True)
    with restore(d) as r:
        assert r.get_range("x", 0, 3).dtype == np.int64


def test_a_big_endian_variable_is_restored_as_its_values(store, tmp_path):
    """A checkpoint whose manifest states a big-endian dtype (saved before stores held
    every variable in the machine's byte order; here made by editing one): restored in
    this machine's order with the values a numpy reader of the manifest's dtype gets
    (``init`` makes '>f8' float64 now: its bytes copied as they were gave other
    values)."""
    d = tmp_path / "d"
    saved(store, d)
    edit(d, lambda m: m["variables"][0].update(dtype=">f8"), resign=True)
    want = np.frombuffer(np.arange(6, dtype=np.float64).tobytes(), ">f8").reshape(3, 2)
    with restore(d) as r:
        got = r.get_range("x", 0, 3)
        assert got.dtype == np.float64 and got.dtype.isnative
        assert np.array_equal(got, want, equal_nan=True)
        assert r.get_range("y", 0, 4).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_load_is_all_or_nothing(store, tmp_path):
    """A damaged block of the last variable: the variables already created by the load
    are removed again; the store keeps what it held."""
    d = tmp_path / "d"
    saved(store, d)
    m = json.loads(raw_of(d))
    v = m["variables"][-1]
    f, off = v["blocks"][0][0], v["blocks"][0][1]
    with open(d / m["files"][f], "r+b") as fh:
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ 1]))
    store.remove("x", "y", "r")
    store.unannotate("obj")
    store.add("keep", np.ones(2))
    with pytest.raises(DDStoreValueError, match="fails its checksum"):
        store.load(d)
    assert store.variables() == ["keep"] and store.annotations() == []


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge", "directory"])
def test_a_manifest_that_is_not_a_small_regular_file_is_refused_unread(store, tmp_path,
                                                                        kind):
    d = tmp_path / "d"
    d.mkdir()
    name = d / ck.MANIFEST
    words = {"fifo": "not a regular file (a FIFO)",
             "dev-zero": "not a regular file (a character device)",
             "huge": "more than the", "directory": "not a regular file (a directory)"}
    if kind == "fifo":
        os.mkfifo(name)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", name)
    elif kind == "huge":  # sparse: no disk used
        with open(name, "wb") as f:
            f.truncate(ck.MAX_MANIFEST_BYTES + 1)
    else:
        name.mkdir()
    with pytest.raises(DDStoreValueError, match=re.escape(words[kind])) as e:
        restore(d)
    assert str(name) in str(e.value)
    store.add("x", np.arange(2))
    with pytest.raises(DDStoreValueError, match=re.escape(words[kind])):
        store.load(d)
    assert store.variables() == ["x"]
    with pytest.raises(DDStoreValueError, match="holds a ddstore-checkpoint.json that"):
        store.save(d)  # not ours: not replaced


def test_a_data_file_that_is_a_fifo_is_refused(store, tmp_path):
    d = tmp_path / "d"
    m = saved(store, d)
    name = d / m["files"][0]
    os.remove(name)
    os.mkfifo(name)
    with pytest.raises(DDStoreValueError, match="not a regular file") as e:
        restore(d)
    assert str(name) in str(e.value)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2])
@pytest.mark.shared_launch("checkpoint_trust.py", timeout=240)
def test_checkpoint_trust_between_ranks(shared_launch, nprocs):
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch


def test_annotation_cuts_and_meta_a_restore_could_not_take_are_refused(store, tmp_path):
    """Cuts that no restore could split a variable at (rows per item that do not divide
    its rows; allowed starts not rising from 0 to its rows, not integers, not 1-D; a
    record set) are refused at annotate, naming them (they were taken, saved, and the
    checkpoint then refused at every width); a meta dict whose keys are not str
    (``{1: 'a', '1': 'b'}``: JSON kept one of them) is refused, naming the key."""
    store.add("v", np.arange(10))
    store.add_records("r", [{"a": np.arange(2)}, {"a": np.arange(3)}])
    for cuts, arrays, said in (
            ({"v": 3}, {}, "cuts['v'] = 3: 3 rows per item, but the variable has 10 rows"),
            ({"v": "c"}, {"c": np.array([0, 5])}, "must rise from 0 to the variable's 10"),
            ({"v": "c"}, {"c": np.array([0, 7, 5, 10])}, "must rise from 0"),
            ({"v": "c"}, {"c": np.array([0., 5.5, 10.])}, "1-D array of integers, got "
                                                          "dtype float64"),
            ({"v": "c"}, {"c": np.array([[0, 10]])}, "shape (1, 2)"),
            ({"r": 1}, {}, "cuts['r'] = 1: it is a record set, not a rows variable")):
        with pytest.raises(DDStoreValueError, match=re.escape(said)):
            store.annotate("o", "K", arrays=arrays, variables=("v", "r"), cuts=cuts)
        assert "o" not in store.annotations()
    for meta, said in (({1: "a", "1": "b"}, "meta: key 1 (int)"),
                       ({"a": [{"b": {(1, 2): 0}}]}, "meta['a'][0]['b']: key (1, 2)"),
                       ([1, 2], "meta must be a dict, got list")):
        with pytest.raises(DDStoreValueError, match=re.escape(said)):
            store.annotate("o", "K", meta)
    # what may be cut is kept and restored, and splits the rows where allowed
    store.annotate("o", "K", {"k": [1, (2, 3)]}, arrays={"c": np.array([0, 4, 4, 10]),
                                                        "s": np.array(3.5)},
                   variables=("v",), cuts={"v": "c"})
    store.save(tmp_path / "d")
    with restore(tmp_path / "d") as r:
        assert r.annotation("o").meta == {"k": [1, [2, 3]]}
        assert r.get_range("v", 0, 10).tolist() == list(range(10))
        # a 0-d array comes back 0-d (it came back of shape (1,))
        s = r.annotation("o").arrays["s"]
        assert s.shape == () and s.dtype == np.float64 and float(s) == 3.5


def test_load_refuses_a_record_field_name_held_either_way(store, tmp_path):
    """A checkpoint's record field ('r/a') and a variable of the store of that name, or
    a checkpoint's variable named like a record field of the store: refused by load as
    any held name is, naming the load and the name (the record set's own check said
    "pick another name or key", which a checkpoint cannot)."""
    store.add_records("r", [{"a": np.arange(2)}])
    store.save(tmp_path / "recs")
    store.remove("r")
    store.add("r/a", np.arange(3))
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"load {str(tmp_path / 'recs')!r}: the store already holds ['r/a']; remove "
            f"them or load into another store")):
        store.load(tmp_path / "recs")
    store.save(tmp_path / "rows")
    store.remove("r/a")
    store.add_records("r", [{"a": np.arange(2)}])
    with pytest.raises(DDStoreValueError, match=re.escape("the store already holds "
                                                          "['r/a']")):
        store.load(tmp_path / "rows")
    assert store.variables() == ["r"]



def _layers(store):
    """One object of each layer that reopens from a checkpoint: ``{kind: open}``."""
    import torch
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg, temporal as tg
    from ddstore.dynamic import DynamicGraph
    from ddstore.spatiotemporal import WindowDataset
    tg.TemporalGraph.from_arrays(store, "g", np.array([0, 1]), np.array([1, 2]),
                                 np.array([1.0, 2.0]))
    tg.NodeMemory(store, "m", 3, 4, 2)
    WindowDataset(store, "w", np.random.default_rng(0).random((64, 3, 1)), 3)
    DynamicGraph(store, "d", [np.array([[0], [1]])] * 4, num_nodes=2)
    dpyg.from_pyg(store, Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0, 1],
                                                                           [1, 2]])))
    return {"TemporalGraph": tg.TemporalGraph.open, "NodeMemory": tg.NodeMemory.open,
            "WindowDataset": WindowDataset.open, "DynamicGraph": DynamicGraph.open,
            "pyg.FeatureStore": dpyg.FeatureStore.open,
            "pyg.GraphStore": dpyg.GraphStore.open}


def _each_edit(src, tmp_path, kinds):
    """``(path, kind, name, key, new)`` for each field of each annotation of a kind in
    ``kinds`` in the checkpoint ``src``: a copy of it at ``path`` with that field removed
    (``new`` None) or, for every other field the layer reads as an integer or a list (the
    suite's time), set to ``'zz'``, its checksum recomputed."""
    for a in json.loads(raw_of(src))["annotations"]:
        kind = next((k for k in kinds if a["kind"].startswith(k)), None)
        if kind is None:
            continue
        # (the PyG stores' annotations are "<name>#<kind>", PyDDStore's "pyddstore:<name>")
        name = a["meta"].get("name", a["name"].split("#")[0].split(":")[-1])
        typed = 0
        for key in sorted(a["meta"]):
            value = a["meta"][key]
            is_typed = isinstance(value, (int, list)) and not isinstance(value, bool)
            typed += is_typed
            edits = [None] + (["zz"] if is_typed and typed % 2 else [])
            for new in edits:
                path = str(tmp_path / f"{a['name']}-{key}-{new}".replace("#", "_"))
                shutil.copytree(src, path)

                def change(m, key=key, new=new, name=a["name"]):
                    meta = next(x for x in m["annotations"] if x["name"] == name)["meta"]
                    if new is None:
                        del meta[key]
                    else:
                        meta[key] = new
                edit(path, change, resign=True)
                yield path, kind, name, key, new


def test_a_layer_field_missing_or_of_another_type_is_named_at_open(store, tmp_path):
    """An annotation's ``meta`` edited by hand, its checksum recomputed (restore takes
    any JSON object there): each layer's ``open`` (and ``PyDDStore.restore``) raises a
    DDStoreValueError naming the object and the field or the wrong value, not the bare
    KeyError / TypeError / ValueError of its code (a probe found 88 of 284 such edits
    raising those)."""
    from mpi4py import MPI
    import pyddstore
    opens = _layers(store)
    src = str(tmp_path / "ck")
    store.save(src)
    pyd = pyddstore.PyDDStore(MPI.COMM_SELF)
    pyd.add("p", np.ones((2, 3), np.float32))
    pyd.save(str(tmp_path / "pyd"))
    pyd.free()
    from ddstore import _lifecycle
    live = len(_lifecycle._LIVE_STORES)
    tried = set()
    edits = [(e, None) for e in _each_edit(src, tmp_path, opens)] + [
        (e, True) for e in _each_edit(str(tmp_path / "pyd"), tmp_path, ["PyDDStore"])]
    for (path, kind, name, key, new), pyd in edits:
        try:
            if pyd:
                pyddstore.PyDDStore.restore(path, MPI.COMM_SELF).free()
            else:
                with DDStore.restore(path, MPI.COMM_SELF, width=1) as s:
                    opens[kind](s, name)
        except DDStoreValueError as exc:
            text = str(exc)
            assert key in text or "'zz'" in text, text
            assert repr(name) in text, text
            tried.add(kind)
        except Exception as exc:  # the bare errors this test is about
            pytest.fail(f"{kind} {name!r} meta[{key!r}] = {new!r}: "
                        f"{type(exc).__name__}: {exc}")
    assert tried == set(opens) | {"PyDDStore"}, sorted(tried)
    # every restored store freed: by the with block (on one rank any exception is
    # agreed), by PyDDStore.restore when its annotations cannot be read
    assert len(_lifecycle._LIVE_STORES) == live
