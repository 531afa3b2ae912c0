"""``scripts/ab_sampling.py``, the A/B of the C samplers that a change to a sampling path
runs (docs/development.md): this tree against itself draws the same bytes in every job
and on every rank (a sampler's draws depend on its seed alone, not on the job, the
timing or the transport's order of arrival), and the comparison fails when one digest
differs."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "ab_sampling.py")
SAMPLERS = ["uniform", "uniform timed", "replace", "replace timed", "last", "last timed",
            "all", "weighted", "weighted replace", "hop", "induced", "temporal recent",
            "temporal uniform", "temporal recent searched", "temporal uniform searched"]


def _module():
    spec = importlib.util.spec_from_file_location("ab_sampling", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.mpi  # the script starts its MPI jobs itself
def test_tree_against_itself_draws_the_same_bytes(tmp_path):
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, SCRIPT, ROOT, ROOT, "--rounds", "1", "--batches", "2",
         "--nodes", "20000", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    names = [r["sampler"] for r in res["rows"]]
    assert names == [f"w{w} {s}" for w in (1, 2) for s in SAMPLERS]
    for r in res["rows"]:
        assert r["same"] is True and len(r["a_ms"]) == len(r["b_ms"]) == 1, r
        assert r["a_ms"][0] > 0 and r["b_ms"][0] > 0, r
    assert "w2 weighted replace" in proc.stdout and "same draws" in proc.stdout


def test_a_differing_digest_fails_the_comparison():
    ab = _module()
    report = [{"w1 x": [1.0, "aa"], "w1 y": [2.0, "bb"]},
              {"w1 x": [1.5, "cc"], "w1 y": [2.5, "dd"]}]   # two ranks
    changed = [dict(report[0]), dict(report[1], **{"w1 y": [5.0, "de"]})]
    rows, same = ab.summarize({0: [report], 1: [report]}, 2)
    assert same and [r["same"] for r in rows] == [True, True]
    rows, same = ab.summarize({0: [report, report], 1: [report, changed]}, 2)
    assert not same and [r["same"] for r in rows] == [True, False]
    slower = [dict(report[0], **{"w1 x": [3.0, "aa"]}), report[1]]  # rank 0's time
    rows, same = ab.summarize({0: [report, report], 1: [report, slower]}, 2)
    assert same and rows[0]["b_ms"] == [1.0, 3.0] and rows[0]["ratio"] == 2.0
