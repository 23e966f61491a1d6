"""Sphinx configuration of popfair's documentation site.

Build (warnings are errors): ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
The site is built and read offline: no intersphinx inventories, no remote fonts or scripts (math is
rendered to MathML at build time by ``_ext/popfair_docs.py``, which Chromium and Firefox draw natively).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))  # this checkout's popfair wins over an installed one
os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import popfair_docs  # noqa: E402  (docs/_ext)

import popfair  # noqa: E402

# Warnings the gallery's examples raise are shown on their pages: as the reader would see them,
# without the build machine's file paths.
warnings.formatwarning = lambda message, category, *_args, **_kwargs: f"{category.__name__}: {message}\n"

project = "popfair"
author = "popfair contributors"
copyright = "popfair contributors"
release = popfair.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",  # a copy button on every code block (its script and icon are bundled: offline)
    "popfair_docs",  # generated config and CLI reference, MathML math, no remote assets
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples/README.rst", "**/GALLERY_HEADER.rst", "reference/_benchmark_scripts.md"]
templates_path = ["_templates"]

# MyST: $...$ and $$...$$ math, ::: fences, heading anchors for [text](page.md#anchor) links.
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# API reference: one page per public name, numpydoc sections; validation keeps docstrings honest.
autosummary_generate = True
autodoc_typehints = "none"  # numpydoc renders the types written in the docstrings
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Types in Parameters/Returns link to their API pages: every public name, and the classes public
# functions return that `popfair.__all__` does not name (API_RETURNED in _ext/popfair_docs.py). Types
# with no page here (DataFrame, str, ...) stay plain text: the site is offline, no intersphinx.
numpydoc_xref_param_type = True
from numpydoc.xref import DEFAULT_LINKS  # noqa: E402

numpydoc_xref_aliases = {
    **{word: word for word in DEFAULT_LINKS},  # numpydoc's links to Python's docs need intersphinx: plain
    **{name: f"popfair.{name}" for name in popfair.__all__ if name != "__version__"},
    **{full.rsplit(".", 1)[1]: full for full in popfair_docs.API_RETURNED},
}
numpydoc_xref_ignore = "all"  # only the aliases above become links; "of", "optional" ... stay words

# Each API page names the concept pages that explain it, and shows its module's docstring when its
# own docstring refers to it ("see the module docstring"): _templates/autosummary/_context.rst.
_CONCEPTS = {
    "estimands": ":doc:`/concepts/estimands`",
    "inference": ":doc:`/concepts/inference`",
    "designs": ":doc:`/concepts/designs`",
    "cases": ":doc:`/concepts/cases`",
    "tables": ":doc:`/tables`",
    "ranking": ":doc:`/ranking`",
    "panel": ":doc:`/tutorials/callback_panel`",
    "troubleshooting": ":doc:`/troubleshooting`",
}
_CONCEPT_PAGES = {
    ("estimands", "inference"): [
        "estimate_pse",
        "PseResult",
        "PseSettings",
        "Effects",
        "Roles",
        "WorldDesign",
        "paired_gap",
        "PairedGapResult",
    ],
    ("estimands", "inference", "tables"): [
        "impact_ratios",
        "ImpactRatioSettings",
        "impact_ratios_from_counts",
        "impact_ratio_inference",
        "RatioInference",
        "ImpactRatios",
    ],
    ("tables", "cases"): ["TableCase", "TableRunResult", "TableSettings", "TableSource", "TableCounts"],
    ("ranking", "designs"): ["parse_ranking", "RankingEstimator"],
    ("cases", "designs"): ["Experiment", "RunResult", "Profiles", "Document", "Job", "DocumentStore"],
    ("panel", "estimands"): ["panel_report"],
    ("troubleshooting", "cases"): ["PopfairError", "ConfigError", "DataError", "EstimationError"],
}
_FULL = {name: f"popfair.{name}" for name in popfair.__all__} | {
    full.rsplit(".", 1)[1]: full for full in popfair_docs.API_RETURNED
}
autosummary_context = {
    "concepts": {
        _FULL[name]: "Concepts: " + ", ".join(_CONCEPTS[c] for c in concepts)
        for concepts, names in _CONCEPT_PAGES.items()
        for name in names
    },
    # a public name bound to a class of another name (WorldDesign: WorldRequest): autodoc would
    # document it as a bare alias, so its page documents the class under its own name
    "aliases": {
        f"popfair.{name}": f"{getattr(popfair, name).__module__}.{getattr(popfair, name).__qualname__}"
        for name in popfair._EXPORTS
        if isinstance(getattr(popfair, name), type) and getattr(popfair, name).__name__ != name
    },
    "module_docs": {
        f"popfair.{name}": module.partition(":")[0]
        for name, module in popfair._EXPORTS.items()
        if "module docstring" in (getattr(popfair, name).__doc__ or "")
    },
}
# Checked as errors: a summary line, no parameter documented that the signature lacks, types and
# return descriptions. PR01 (every parameter documented) is not yet: the table-case and document-store
# classes still list their dataclass fields in comments only.
numpydoc_validation_checks = {"GL08", "PR02", "PR07", "RT02", "SS01"}

popfair_docs.quiet_progress_bars()  # the gallery's output blocks show what examples print, not bars
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "plot_gallery": "True",
    "abort_on_example_error": True,
    "matplotlib_animations": False,
    "image_scrapers": ("popfair_docs.figure_scraper",),  # a block ending with a Figure shows it
    "ignore_repr_types": r"matplotlib\.figure\.Figure",
    "reset_modules": ("matplotlib",),
    "min_reported_time": 10,
    "show_memory": False,
    "write_computation_times": False,  # its timing page loads DataTables from a CDN: the site is offline
}

# Copy what a reader would type: the prompts of console sessions ("$ ") and doctest/gallery ">>> " are
# left out, and so are output lines.
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False
copybutton_exclude = ".linenos, .gp, .go"

html_theme = "pydata_sphinx_theme"
html_title = "popfair"
html_static_path = ["_static"]
html_css_files = ["popfair.css"]
html_favicon = "_static/favicon.svg"  # else every browser asks for /favicon.ico and logs a 404; each page
# carries it inline (popfair_docs.inline_favicon), so no page makes a request for it that can fail
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "header_links_before_dropdown": 6,
}
html_context = {"default_mode": "light"}
html_sidebars = {"index": [], "getting_started": []}  # single pages: no empty section navigation
