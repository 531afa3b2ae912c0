"""Writers of the two file layouts the DDStore paper compares against: PFF and CFF."""
from .._checks import sample_at
from ..errors import DDStoreError, DDStoreValueError
from ..sources import write_pickle_files, write_records_adios
from .layout import GraphLayout

__all__ = ["write_pickle_dir", "write_adios", "graph_records"]

META_KIND = "ddstore.graphs"


def graph_records(samples, what="samples"):
    """``(layout, records)`` of a sequence of graph samples; every sample must have the
    layout of sample 0 (the error names the sample index and the key)."""
    n = len(samples)
    if n == 0:
        raise DDStoreValueError(f"{what}: empty data set (no samples)")
    layout, records = None, []
    for i in range(n):
        try:
            if layout is None:
                layout, rec = GraphLayout.of(samples[i])
            else:
                rec = layout.to_record(samples[i])
        except DDStoreError as exc:
            raise DDStoreValueError(f"{what}: sample {i}: {exc}") from None
        records.append(rec)
    return layout, records


def write_pickle_dir(samples, path, progress=False):
    """Write each graph of ``samples`` to its own pickle file in directory ``path``
    (PFF: ``sample-<i>.pkl`` plus ``ddstore-pff.json``).  Local: call it on one rank.
    Returns the number of files.  Sample 0 is checked as a graph first (its keys and
    values, as :func:`write_adios` checks every sample; the others are checked when
    they are loaded)."""
    if len(samples) == 0:
        raise DDStoreValueError(f"write_pickle_dir({path!r}): empty data set (no "
                                f"samples)")
    try:
        GraphLayout.of(sample_at(samples, 0, f"write_pickle_dir({path!r})"))
    except DDStoreError as exc:
        raise DDStoreValueError(f"write_pickle_dir({path!r}): sample 0: {exc}") from None
    return write_pickle_files(samples, path, progress=progress, call="write_pickle_dir")


def write_adios(samples, path, progress=False):
    """Write ``samples`` (a sequence of graphs: ``len`` and indexing) to one ADIOS2 BP
    file ``path`` (CFF): per key, every graph's rows concatenated (``data/<key>``) plus
    per-sample offsets (``offsets/<key>``), and the graph layout as an attribute.

    Streams: samples are converted and written in blocks of about 64 MB, so a data set
    larger than memory can be written (a lazy sequence such as :func:`ising_dataset`
    builds each graph on demand).  Every sample must have the layout of sample 0 (the
    error names the sample and the key; the partial file is removed).  ``path`` must be
    new, an empty directory or a CFF file of an earlier write, which is replaced only
    once the new file is complete (:func:`ddstore.sources.write_records_adios`: nothing
    else is ever removed or overwritten).  Local: call it on one rank.  Returns the
    number of samples."""
    what = f"write_adios({path!r})"
    n = len(samples)
    if n == 0:
        raise DDStoreValueError(f"{what}: empty data set (no samples)")
    try:
        layout, first = GraphLayout.of(sample_at(samples, 0, what))
    except DDStoreError as exc:
        raise DDStoreValueError(f"{what}: sample 0: {exc}") from None

    def records():
        yield first
        for i in range(1, n):
            sample = sample_at(samples, i, what)
            try:
                yield layout.to_record(sample)
            except DDStoreError as exc:
                raise DDStoreValueError(f"{what}: sample {i}: {exc}") from None

    return write_records_adios(records(), path, progress=progress, total=n,
                               meta={"kind": META_KIND, "layout": layout.to_list()},
                               call="write_adios")
