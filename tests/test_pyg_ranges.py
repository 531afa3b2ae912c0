"""The range-wise loading path of ddstore.pyg (ranges.py: load_ogb, load_npy,
load_synthetic) on 2 ranks against the files; the bounded puts (callables given to
put_edge_range / put_range, put_node_data's pieces) byte-equal to the array path
(tests/mpi/pyg_callables.py, in-process on one rank and on 2 and 3 ranks); and a smoke
run of the benchmark (python -m ddstore.bench.pyg).  The readers themselves are tested
in-process in test_sources_nodes.py; the example in test_examples.py."""
import json

import pytest

from conftest import passed_on, passes_in_process, widths_program_test


def test_callables_one_rank():
    """tests/mpi/pyg_callables.py on one rank, in this process (width 1)."""
    passes_in_process("pyg_callables", [1], more_than=500)


test_callables = widths_program_test(
    "pyg_callables.py", [(2, "all"), (3, "3")], timeout=300,
    doc="2 ranks: widths 1 and 2; 3 ranks: width 3 (uneven stripes).")


@pytest.mark.mpi
@pytest.mark.shared_launch("pyg_ranges.py", nprocs=2, timeout=180)
def test_range_loaders_on_two_ranks(shared_launch):
    passed_on(shared_launch, 2)


@pytest.mark.mpi
def test_benchmark_smoke(tmp_path_factory):
    """mpiexec -n 2 python -m ddstore.bench.pyg on a tiny graph: width 2, both transports;
    the JSON names the numbers (the one-sided traffic per batch among them: some over
    rma, none where every read is a load) and says why the in-memory reference did or did
    not run."""
    from bench_job import bench_output
    out, tmp_path = bench_output("pyg", tmp_path_factory)
    assert "width 2 auto" in out and "sampled edges/s per rank" in out, out
    res = json.load(open(tmp_path / "pyg_n2.json"))
    assert res["benchmark"] == "pyg" and res["ranks"] == 2 and res["num_nodes"] == 2449
    assert res["command"].startswith("mpiexec -n 2 python -m ddstore.bench.pyg --scale")
    assert res["seed"] == 0 and res["versions"]["torch_geometric"] and res["versions"]["mpi"]
    r, r_rma = res["results"]
    assert r_rma["transport"] == "rma" and r_rma["shm_peers"] == 0, r_rma
    assert "network per batch:" in out, out
    for q in [r_rma["rma"]] + [v["rma"] for v in r_rma["by_option"].values()]:
        assert q["remote_owners"] == 1 and len(q["by_rank"]) == 2, q
        # 3 hops x (nbr, eid) + x + y, at least one gathered get and flush each
        assert q["gets_per_batch"] > 0 and q["round_trips_per_batch"] > 0, q
        assert q["bytes_per_batch"] > 0 and q["gets_per_owner_per_batch"] > 0, q
        assert q["round_trips_per_owner_per_batch"] > 0, q
    if r["shm_peers"] == 1:  # inside a node: every read a load, nothing counted
        assert r["rma"]["gets_per_batch"] == 0 and r["rma"]["remote_owners"] == 0, r["rma"]
    assert r["width"] == 2 and r["edges_per_s_per_rank"] > 0 and r["batches_per_s_per_rank"] > 0
    assert len(r["peak_rss_per_rank"]) == 2 and min(r["peak_rss_per_rank"]) > 0
    assert sorted(r["by_option"]) == ["backward", "bidirectional", "bidirectional_sampler",
                                      "directional", "induced", "temporal", "weighted"]
    assert all(v["over_directional"]["control"] for v in r["by_option"].values())
    assert all(v["ms_per_batch"] > 0 and v["edges_per_batch"] > 0
               for v in r["by_option"].values()), r["by_option"]
    assert r["weights_bytes_per_rank"] > 0 and "by option" in out, out
    mem = res["in_memory"]
    if mem["sampler_library"] is None:
        assert not mem["available"] and "requires either 'pyg-lib' or 'torch-sparse'" in \
            mem["reason"], mem
        assert res["targets"]["meets_throughput"] is None
    else:
        assert mem["available"] and mem["edges_per_s_per_rank"] > 0
