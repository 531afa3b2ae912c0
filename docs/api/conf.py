"""Sphinx configuration of ddstore's API reference (``docs/api``).

Built from the docstrings by ``sphinx-build -W -b html docs/api <out>`` (warnings are
errors); ``tests/test_docs.py`` runs that build, so CI builds it with the test suite.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # ddstore and pyddstore from this tree (the C core built in place)

project = "ddstore"
author = "the ddstore authors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]

napoleon_numpy_docstring = True
napoleon_google_docstring = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False                     # references to torch / numpy / PyG types stay plain
html_theme = "alabaster"
html_static_path = []
exclude_patterns = ["_build"]
