"""Sphinx extension of popfair's site: pages generated from the project itself, so they cannot drift.

- The configuration reference (``reference/config/``): every config group under ``conf/``, every
  option (YAML file) with its header comment, and every key with its default and its comment, read
  from the YAML files at build time (comments included: they are the documentation).
- The command-line reference (``reference/cli.md``): the ``--help`` of every console script in
  pyproject.toml (``popfair``, ``popfair-report``, ``popfair-export``, ``popfair-data``) as it prints it.
- Math as MathML, converted at build time by docutils (no MathJax download: the site works offline).
- What commands print (``console/``, committed): the guides show the console output of a run of the
  command they document (``COMMAND_OUTPUTS``), written by ``--refresh-outputs``, never pasted by hand;
  a test runs the command and fails when a file is stale.
- The favicon inlined in every page as a data: URI (``inline_favicon``).

The generated Markdown goes to folders git ignores (``docs/.gitignore``) and is rewritten only when
its text changes, so incremental builds stay incremental.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.utils.math.latex2mathml import tex2mathml
from sphinx.application import Sphinx

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
CONF = ROOT / "conf"
CONFIG_OUT = DOCS / "reference" / "config"
CLI_OUT = DOCS / "reference" / "cli.md"

# Subcommands whose own --help is shown too (the tools themselves are pyproject.toml's [project.scripts]).
CLI_SUBCOMMANDS = {"popfair-data": [["pums"], ["cache"]]}


def cli_tools() -> list[tuple[str, str, str]]:
    """(program, module, function) of every console script pyproject.toml declares."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return [(prog, *target.split(":")) for prog, target in scripts.items()]


# --- configuration reference -------------------------------------------------------------------


@dataclass
class Key:
    """One key of a config file: its dotted path, its default as written, and its comment."""

    path: str
    value: str
    comment: str


def _comment_at(line: str, start: int) -> tuple[str, int] | None:
    """The comment in `line` at or after column `start` (text after `#`) and its column, if any."""
    match = re.search(r"(?:^|\s)#\s?(.*)$", line[start:])
    if match is None:
        return None
    return match.group(1).rstrip(), start + match.start(0) + (0 if line[start + match.start(0)] == "#" else 1)


def _header(lines: list[str]) -> tuple[list[str], str | None]:
    """The file's leading comment block (without the `# @package` line) and its package, if any."""
    header, package = [], None
    for line in lines:
        if not line.startswith("#"):
            break
        text = line[1:].strip() if line.startswith("# ") or line == "#" else line[1:].rstrip()
        if text.startswith("@package"):
            package = text.split(None, 1)[1] if " " in text else None
            continue
        header.append(line[2:] if line.startswith("# ") else line[1:])
    return header, package


def _source(text_lines: list[str], node: yaml.Node) -> str:
    """A node's text as written in the file (flow collections, interpolations, quotes kept)."""
    start, end = node.start_mark, node.end_mark
    block_mapping = isinstance(node, yaml.MappingNode) and not node.flow_style
    if block_mapping and node.value and node.value[-1][1].end_mark.line == start.line:
        end = node.value[-1][1].end_mark  # a one-line block mapping (a defaults entry) ends at its last value
    if start.line == end.line:
        return text_lines[start.line][start.column : end.column]
    return json.dumps(yaml.safe_load(yaml.serialize(node)))


def config_keys(text: str) -> list[Key]:
    """Every key of a YAML config (nested keys dotted, `defaults` entries one each) with its comment.

    A key's comment is the comment on its line, the comment lines right below it aligned with that
    comment (a wrapped comment), and the comment lines right above it at its own indentation.
    """
    lines = text.splitlines()
    root = yaml.compose(text)
    if root is None:
        return []
    header_end = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    keys: list[Key] = []

    def comment_for(line_no: int, after_col: int, indent: int) -> str:
        parts: list[str] = []
        above: list[str] = []
        i = line_no - 1
        while i >= header_end and lines[i].strip().startswith("#") and len(lines[i]) - len(lines[i].lstrip()) == indent:
            above.insert(0, lines[i].strip()[1:].strip())
            i -= 1
        parts += above
        found = _comment_at(lines[line_no], after_col)
        if found is not None:
            text_, col = found
            parts.append(text_)
            j = line_no + 1
            while j < len(lines) and lines[j].strip().startswith("#") and lines[j].index("#") == col:
                parts.append(lines[j].strip()[1:].strip())
                j += 1
        return " ".join(p for p in parts if p)

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                path = f"{prefix}{key_node.value}"
                line = key_node.start_mark.line
                block = isinstance(value, yaml.MappingNode | yaml.SequenceNode) and value.start_mark.line > line
                shown = "" if block else _source(lines, value)
                after = key_node.end_mark.column + 1 if block else value.end_mark.column
                if not block and value.end_mark.line != line:  # a multi-line scalar: no same-line comment
                    after = len(lines[line])
                keys.append(Key(path, shown, comment_for(line, after, key_node.start_mark.column)))
                if block and isinstance(value, yaml.MappingNode):
                    walk(value, path + ".")
                elif block and isinstance(value, yaml.SequenceNode):
                    for item in value.value:
                        item_line = item.start_mark.line
                        keys.append(
                            Key(
                                f"{path}[]",
                                _source(lines, item),
                                comment_for(item_line, item.start_mark.column, item.start_mark.column - 2),
                            )
                        )

    walk(root, "")
    return keys


def config_groups() -> dict[str, list[str]]:
    """Group -> options, as `popfair --help` lists them (popfair.runtime.cli_help is the one definition)."""
    from popfair.runtime.cli_help import config_groups as groups

    return groups(CONF)


HYDRA_GROUPS = ["hydra/launcher", "hydra/sweeper"]  # popfair's own options of Hydra's groups


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    if not text:
        return ""
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return _cell(f"{ticks}{pad}{text}{pad}{ticks}")


def _header_markdown(header: list[str]) -> list[str]:
    """A config file's header comment as Markdown: prose lines as paragraphs, indented lines (command
    examples) as code blocks."""
    out: list[str] = []
    prose: list[str] = []
    code: list[str] = []
    for line in [*header, ""]:
        if line.startswith((" ", "\t")) and line.strip():
            if prose:
                out += [_text(" ".join(prose)), ""]
                prose = []
            code.append(line.strip() if not code else line[2:] if line.startswith("  ") else line)
            continue
        if code:
            out += ["```text", *code, "```", ""]  # not bash: a comment may hold an unpaired quote
            code = []
        if line.strip():
            prose.append(line.strip())
        elif prose:
            out += [_text(" ".join(prose)), ""]
            prose = []
    return out


def _text(text: str) -> str:
    """Comment text as Markdown: `<race> <sex>` outside code spans is text, not an HTML tag to drop."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else part.replace("<", "\\<") for part in parts)


def _prose(text: str) -> str:
    """A comment as one Markdown paragraph of a list item: never read as a list, quote or heading."""
    text = _text(" ".join(text.split()))
    return "\\" + text if re.match(r"([-+*#>|]|\d+[.)])(\s|$)", text) else text


@dataclass
class Entry:
    """One key as the reference lists it, with the items of its list (a `key[]` row each in `config_keys`)."""

    key: Key
    items: list[Key]


def _entries(keys: list[Key]) -> list[Entry]:
    entries: list[Entry] = []
    for key in keys:
        if key.path.endswith("[]") and entries and entries[-1].key.path == key.path[:-2]:
            entries[-1].items.append(key)
        else:
            entries.append(Entry(key, []))
    return entries


def key_list(keys: list[Key]) -> list[str]:
    """An option's keys as a two-line list that wraps in the page column at any width: the key and its
    default on the first line, its comment below (a key without a comment takes one line). A list's
    items follow its key: inline when none has a comment, one line each otherwise."""
    out = [":::{container} config-keys", ""]
    for entry in _entries(keys):
        key = entry.key
        first = f"- {_code(key.path)}" + (f" = {_code(key.value)}" if key.value else "")
        if entry.items and not any(item.comment for item in entry.items):
            first += f" ({len(entry.items)} items): " + ", ".join(_code(item.value) for item in entry.items)
        out.append(first)
        if key.comment:
            out += ["", f"  {_prose(key.comment)}"]
        if entry.items and any(item.comment for item in entry.items):
            out.append("")
            out += [
                f"  - {_code(item.value)}" + (f": {_prose(item.comment)}" if item.comment else "")
                for item in entry.items
            ]
        out.append("")
    out += [":::", ""]
    return out


def option_section(group: str, option: str, path: Path, level: str = "##") -> str:
    """The Markdown section of one option: `group=option`, its header comment and its keys."""
    text = path.read_text()
    header, package = _header(text.splitlines())
    keys = config_keys(text)
    out = [f"{level} `{group}={option}`" if group else f"{level} `{option}`", ""]
    out.append(f"File `conf/{path.relative_to(CONF).as_posix()}`" + (f" (package `{package}`)." if package else "."))
    out.append("")
    out += _header_markdown(header)
    if keys:
        out += key_list(keys)
    return "\n".join(out)


def group_page(group: str, options: list[str]) -> str:
    title = {
        "screener/base": "screener/base (shared screener settings)",
    }.get(group, group)
    intro = (
        f"Choose one option with `{group}=<option>` on the command line ({', '.join(f'`{o}`' for o in options)})."
        if not group.startswith("hydra/") and group != "screener/base"
        else (
            "Files the hosted-model screeners include first (`defaults: [base/llm@_here_]`); set their keys "
            "through `screener.<key>`."
            if group == "screener/base"
            else f"popfair's own options of Hydra's `{group}` group (`{group}=<option>`)."
        )
    )
    parts = [f"# {title}", "", "Generated from `conf/` when the site is built.", "", intro, ""]
    for option in options:
        parts.append(option_section(group, option, CONF / group / f"{option}.yaml"))
    return "\n".join(parts)


def config_index(groups: dict[str, list[str]]) -> str:
    rows = "\n".join(
        f"| [{_cell(g)}]({g.replace('/', '_')}.md) | {_cell(', '.join(f'`{o}`' for o in opts))} |"
        for g, opts in groups.items()
    )
    toctree = "\n".join(g.replace("/", "_") for g in groups)
    top = option_section("", "config.yaml (top-level keys)", CONF / "config.yaml")
    return f"""# Configuration reference

Generated from `conf/` when the site is built: every config group, every option, every key with its
default and its comment. A case is composed from `conf/config.yaml` and one option of each group;
override an option with `group=option` and a key with `group.key=value` on the command line
(`python -m popfair screener=gpt4o_mini screener.engine.concurrency=32`). `python -m popfair --cfg job`
prints the composed config of a case.

| group | options |
|---|---|
{rows}

```{{toctree}}
:hidden:

{toctree}
```

{top}
"""


def _write(path: Path, text: str) -> None:
    """Write only when the text changed: Sphinx then rebuilds only pages whose source changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_config_reference() -> None:
    groups = config_groups()
    hydra = {g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in HYDRA_GROUPS if (CONF / g).is_dir()}
    all_groups = {**groups, **hydra}
    wanted = {f"{g.replace('/', '_')}.md" for g in all_groups} | {"index.md"}
    for stale in CONFIG_OUT.glob("*.md") if CONFIG_OUT.is_dir() else []:
        if stale.name not in wanted:
            stale.unlink()
    _write(CONFIG_OUT / "index.md", config_index(all_groups))
    for group, options in all_groups.items():
        _write(CONFIG_OUT / f"{group.replace('/', '_')}.md", group_page(group, options))


# --- benchmark scripts: every script in benchmarks/ with what its docstring says it measures ----------

BENCH_OUT = DOCS / "reference" / "_benchmark_scripts.md"  # included by reference/benchmarks.md


def write_benchmark_scripts() -> None:
    import ast

    rows = ["| script | what it measures and prints (its docstring) |", "|---|---|"]
    for path in sorted((ROOT / "benchmarks").glob("[!_]*.py")):  # _*.py: shared by scripts, not one
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split())
        rows.append(f"| `python benchmarks/{path.name}` | {_cell(first)} |")
    _write(BENCH_OUT, "\n".join(rows) + "\n")


# --- user guides: the topic pages at the top of docs/ ----------------------------------------------

GUIDES_OUT = DOCS / "guides.md"
# Topic pages written beside the code they document; any other top-level page lands here too, so a
# new docs/<topic>.md is part of the site (and of its search) as soon as it exists.
GUIDE_ORDER = ["tables", "ranking", "troubleshooting", "performance"]
NOT_GUIDES = {"index", "getting_started", "replication", "guides", "changelog"}


def write_guides() -> None:
    found = {p.stem for p in DOCS.glob("*.md")} - NOT_GUIDES
    pages = [g for g in GUIDE_ORDER if g in found] + sorted(found - set(GUIDE_ORDER))
    _write(
        GUIDES_OUT,
        "\n".join(
            [
                "# User guides",
                "",
                "Topic guides: auditing decisions that already exist (tables), the ranking design, what to do",
                "when something fails, and how popfair keeps sweeps fast.",
                "",
                "```{toctree}",
                ":maxdepth: 2",
                "",
                *pages,
                "```",
                "",
            ]
        ),
    )


# --- what commands print, shown in the guides ---------------------------------------------------------

COMMAND_OUT = DOCS / "console"
# name -> the popfair arguments of a command whose console summary a page shows with
# ```{literalinclude} console/<name>.txt```. The file is committed, so the page shows it on a fresh
# clone and on a code host too; tests/test_first_hour.py runs the command and fails when the file is
# stale (the lines that change every run masked: VOLATILE); `python docs/_ext/popfair_docs.py
# --refresh-outputs` writes them again.
COMMAND_OUTPUTS: dict[str, list[str]] = {"default_case": []}
VOLATILE = ("MLflow run id:", "the run:", "time: ")  # a run's id, its link and its stage seconds


def stable(output: str) -> str:
    """A command's output less the lines that differ from run to run (VOLATILE)."""
    return "".join(line for line in output.splitlines(keepends=True) if not line.lstrip().startswith(VOLATILE))


def command_output(args: list[str], cwd: Path) -> str:
    """What `python -m popfair ARGS` prints once its case is done (from the `=== popfair case` line
    on: the effects table, the notes under it, the pattern, the MLflow run and the stage times), run
    in `cwd` with this checkout's popfair. RuntimeError when the command fails."""
    import os

    done = subprocess.run(
        [sys.executable, "-m", "popfair", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DATAFRAME_FRAMEWORK": "pandas", "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0 or "=== popfair case" not in done.stdout:
        raise RuntimeError(f"python -m popfair {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout[done.stdout.index("=== popfair case") :].rstrip() + "\n"


def refresh_command_outputs() -> None:
    """Run every COMMAND_OUTPUTS command in a fresh folder and commit-ready keep what it prints."""
    import tempfile

    for name, args in COMMAND_OUTPUTS.items():
        with tempfile.TemporaryDirectory() as folder:
            _write(COMMAND_OUT / f"{name}.txt", command_output(args, Path(folder)))


# --- Python API reference ------------------------------------------------------------------------

API_OUT = DOCS / "reference" / "api" / "index.md"
# Sections of the API page by the defining module's package; a name from a new package goes under "Other".
API_SECTIONS = [
    ("popfair.case", "Running a case", "A case composed from a Hydra config, run and logged."),
    ("popfair.case.table", "Table cases", "Audits of decisions that already exist: a table is the case's source."),
    ("popfair.design.table", "Tables", "What a table case reads and how its columns map to popfair's."),
    ("popfair.estimate", "Estimators", "Functions of a scored table: effects with confidence intervals."),
    ("popfair.design", "Designs", "How applicants become prompts and replies become rows (ranking: k per prompt)."),
    ("popfair.render", "Documents", "Rendered documents and the store that keeps them for later cases."),
    ("popfair.report", "Reports", "Tables and figures over many cases."),
    ("popfair.core.types", "Data types", "What flows between the pipeline's stages."),
    ("popfair.core.errors", "Errors", "What popfair raises: one line naming the config key or input at fault."),
]


# Classes public functions return that `popfair.__all__` does not name: each gets its page too, under
# the stage package that exports it (`impact_ratios` returns an ImpactRatios).
API_RETURNED = ["popfair.estimate.ImpactRatios"]


def write_api_reference() -> None:
    """The API page: every name of `popfair.__all__`, one autosummary table per section."""
    import popfair

    exports: dict[str, str] = popfair._EXPORTS
    missing = sorted(set(popfair.__all__) - set(exports) - {"__version__"})
    if missing:
        raise RuntimeError(f"popfair.__all__ names without a module in popfair._EXPORTS: {missing}")
    sections: dict[str, list[str]] = {}
    for name, spec in exports.items():
        module = spec.partition(":")[0]
        owners = [p for p, _, _ in API_SECTIONS if module == p or module.startswith(p + ".")]
        prefix = max(owners, key=len) if owners else "other"  # the most specific section
        sections.setdefault(prefix, []).append(name)
    parts = [
        "# Python API",
        "",
        "Generated from `popfair.__all__` when the site is built. Every name imports from `popfair`",
        "(lazily: `import popfair` loads no pandas, MLflow or provider SDK until a name is used);",
        f"`popfair.__version__` is the installed version (`{popfair.__version__}` here). The stage packages",
        "(`popfair.estimate`, `popfair.population`, `popfair.render`, `popfair.screen`, `popfair.track`,",
        "`popfair.report`) export their own public names the same way.",
        "",
        "```python",
        "import popfair",
        "",
        "result = popfair.estimate_pse(",
        '    data, x="gender", x0="female", x1="male",',
        '    z=["race", "age"], b=["edu_group", "exp_year"], r=["first_name", "state"], y="score",',
        ")",
        'gap = popfair.paired_gap(pairs, y_adv="white", y_other="black", cluster="posting_id")',
        'ratios = popfair.impact_ratios(scored, y="y", sex="gender", race="race")',
        "panel = popfair.panel_report(panel_rows)  # one paired_gap row per model x axis",
        "run = popfair.Experiment.from_config(cfg).run()  # cfg: a composed Hydra config",
        "```",
        "",
        "Their docstrings (numpydoc) list parameters, returns and examples; the [gallery](../../auto_examples/index.rst)",
        "runs them on the bundled data.",
        "",
    ]
    titles = [*API_SECTIONS, ("other", "Other", "")]
    for prefix, title, blurb in titles:
        names = sections.get(prefix)
        if not names:
            continue
        parts += [f"## {title}", "", blurb, "", "```{eval-rst}", ".. currentmodule:: popfair", "", ".. autosummary::"]
        parts += ["   :toctree: generated", "   :nosignatures:", ""]
        parts += [f"   {name}" for name in names]
        parts += ["```", ""]
    parts += [
        "## Returned types",
        "",
        "What the functions above return, where `popfair` itself does not export the class.",
        "",
    ]
    for full in API_RETURNED:
        package, name = full.rsplit(".", 1)
        parts += ["```{eval-rst}", f".. currentmodule:: {package}", "", ".. autosummary::"]
        parts += ["   :toctree: generated", "   :nosignatures:", "", f"   {name}", "```", ""]
    _write(API_OUT, "\n".join(parts))


# --- command-line reference ----------------------------------------------------------------------


def tool_help(prog: str, module: str, function: str, args: list[str]) -> str:
    code = f"import sys; sys.argv[0] = {prog!r}; from {module} import {function}; {function}()"
    done = subprocess.run(
        [sys.executable, "-c", code, *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"{prog} {' '.join(args)} --help failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout.rstrip()


def write_cli_reference() -> None:
    parts = [
        "# Command-line tools",
        "",
        "Generated when the site is built from each tool's `--help`. `popfair` and `popfair-export` take",
        "Hydra overrides (`group=option`, `group.key=value`; see the",
        "[configuration reference](config/index.md)); the others are argparse programs.",
        "",
    ]
    for prog, module, function in cli_tools():
        parts += [f"## `{prog}`", "", "```text", f"$ {prog} --help", tool_help(prog, module, function, []), "```", ""]
        for sub in CLI_SUBCOMMANDS.get(prog, []):
            parts += [
                "```text",
                f"$ {prog} {' '.join(sub)} --help",
                tool_help(prog, module, function, sub),
                "```",
                "",
            ]
    _write(CLI_OUT, "\n".join(parts))


# --- math as MathML --------------------------------------------------------------------------------


def _mathml(latex: str, block: bool) -> str:
    return tex2mathml(latex, as_block=block)


def visit_math_inline(self: Any, node: nodes.math) -> None:
    self.body.append(_mathml(node.astext(), block=False))
    raise nodes.SkipNode


def visit_math_block(self: Any, node: nodes.math_block) -> None:
    self.body.append(f'<div class="math-block">{_mathml(node.astext(), block=True)}</div>')
    raise nodes.SkipNode


def generate(app: Sphinx) -> None:
    write_config_reference()
    write_cli_reference()
    write_api_reference()
    write_guides()
    write_benchmark_scripts()


def inline_favicon(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """The page's icon link as a data: URI of `html_favicon`, not a URL. A browser asks for a favicon
    only after the page has loaded, so a reader (or a check) moving on at once aborts that request:
    every page showed a failed request for _static/favicon.svg. Inlined, there is no request to fail."""
    import base64
    import mimetypes

    if not app.config.html_favicon or "://" in app.config.html_favicon:
        return
    path = Path(app.confdir) / app.config.html_favicon
    kind = mimetypes.guess_type(path.name)[0] or "image/x-icon"
    context["favicon_url"] = f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_html_math_renderer("mathml", (visit_math_inline, None), (visit_math_block, None))
    app.config.html_math_renderer = "mathml"
    app.connect("html-page-context", inline_favicon, priority=900)  # after Sphinx makes favicon_url a path
    app.connect("config-inited", lambda app, config: generate(app))  # before autosummary reads sources
    # env_version: raised when what the extension writes into every page changes (2: the inline favicon),
    # so that an incremental build rewrites every page instead of only the edited ones
    return {"version": "2", "env_version": 2, "parallel_read_safe": True, "parallel_write_safe": True}


# --- gallery: figures are shown where an example's code block ends with one ----------------------


def quiet_progress_bars() -> None:
    """No progress bars in the gallery's output blocks: the examples run inside the build, where a bar
    would be frozen as a line of escape codes ("render: 100%|####| 400/400 ..."). popfair draws its bars
    with tqdm and sets `disable` itself (from `screener.engine.progress`), so the build switches tqdm
    off at its class; a reader running an example in a terminal sees the bars."""
    from tqdm import std

    init = std.tqdm.__init__
    if getattr(init, "_popfair_quiet", False):
        return

    def quiet(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    quiet._popfair_quiet = True  # type: ignore[attr-defined]
    std.tqdm.__init__ = quiet  # type: ignore[method-assign]


_shown: dict[str, set[int]] = {}


def figure_scraper(block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any]) -> str:
    """sphinx-gallery scraper for popfair's figures: a code block that ends with a matplotlib Figure
    (popfair draws on `Figure` objects, outside pyplot's state) shows that figure below the block."""
    from matplotlib.figure import Figure
    from sphinx_gallery.scrapers import figure_rst

    figure = block_vars["example_globals"].get("___")
    shown = _shown.setdefault(str(block_vars["src_file"]), set())
    if not isinstance(figure, Figure) or id(figure) in shown:
        return ""
    shown.add(id(figure))
    path = next(block_vars["image_path_iterator"])
    figure.savefig(path, dpi=110, bbox_inches="tight")
    return figure_rst([path], gallery_conf["src_dir"])


if __name__ == "__main__":  # python docs/_ext/popfair_docs.py --refresh-outputs
    if sys.argv[1:] == ["--refresh-outputs"]:
        refresh_command_outputs()
    else:
        sys.exit("usage: python docs/_ext/popfair_docs.py --refresh-outputs")
