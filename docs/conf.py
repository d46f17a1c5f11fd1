"""Sphinx configuration for the zkrecipes documentation.

Build (as ``make docs`` does): ``python -m sphinx -W --keep-going -q -b html docs docs/_build/html``.
Warnings are errors and none is suppressed.
"""

import os
import sys

# Document the source tree this file belongs to, installed or not.
sys.path.insert(0, os.path.abspath(".."))

import zkrecipes  # noqa: E402

project = "zkrecipes"
author = "zkrecipes contributors"
copyright = "zkrecipes contributors"
release = zkrecipes.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build"]
root_doc = "index"

autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "alabaster"
html_title = f"zkrecipes {release}"
