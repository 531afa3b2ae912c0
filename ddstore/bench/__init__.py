"""Benchmarks: scripts that print numbers and write them as JSON (``python -m
ddstore.bench.<name>``; see README "Benchmarks")."""
import json
import os


def write_report(report, path):
    """Write ``report`` as indented JSON to ``path`` (directories created); print it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {path}")
