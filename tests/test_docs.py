"""The documentation site, checked as a reader would: built with warnings as errors, served on
127.0.0.1 and opened in headless Debian chromium (playwright).

The site is built once per session into docs/_build/html (what `.ci/run` builds in its docs step is
reused when it is newer than every source: docs/, conf/, popfair/). Skipped only where the `docs`
extra or /usr/bin/chromium is missing; `.ci/run` installs both, so it never skips there.
"""

from __future__ import annotations

import functools
import html
import http.server
import importlib.util
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.browser import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"
SHOTS = DOCS / "_build" / "screenshots"  # build output, ignored by git
GENERATED = (
    "_build",
    "_generated",
    "auto_examples",
    "reference/config",
    "reference/api",
    "reference/cli.md",
    "sg_execution_times",
)

missing = [
    m
    for m in (
        "sphinx",
        "sphinx_gallery",
        "pydata_sphinx_theme",
        "numpydoc",
        "myst_parser",
        "sphinx_copybutton",
        "playwright",
    )
    if importlib.util.find_spec(m) is None
]
pytestmark = [
    pytest.mark.skipif(bool(missing), reason=f"docs extra not installed ({missing}): pip install -e '.[docs]'"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed: apt-get install chromium"),
    pytest.mark.xdist_group("docs"),  # one worker builds and serves the site
    pytest.mark.timeout(900),
]


def _sources() -> Iterator[Path]:
    for folder in (DOCS, ROOT / "conf", ROOT / "popfair"):
        for path in folder.rglob("*"):
            relative = path.relative_to(DOCS).as_posix() if folder == DOCS else ""
            if path.is_file() and not relative.startswith(GENERATED) and "__pycache__" not in path.parts:
                yield path


@pytest.fixture(scope="session")
def site() -> Path:
    """The built site: reused when newer than every source, else built here (warnings are errors)."""
    index = HTML / "index.html"
    if not index.exists() or max(p.stat().st_mtime for p in _sources()) > index.stat().st_mtime:
        done = subprocess.run(
            [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(DOCS), str(HTML)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"sphinx-build failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return HTML


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site over HTTP on 127.0.0.1 (a free port), as a reader's browser gets it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            # chromium, keeping its HTTP cache, drops a transfer it no longer needs (a broken pipe)
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)  # type: ignore[arg-type]

    server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")  # closed before other modules' tests: a session-long sync playwright hangs
def browser(served: str):  # at its exit once other tests ran in the same worker
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # every host but this one fails to resolve: the site must work offline, and remote requests
        # are refused by the browser itself (routing them through playwright would turn off the
        # HTTP cache, and every page would fetch and compile the theme's scripts again)
        offline = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, offline])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def context(browser):
    """One browser context (a reader's tab set at 1280 x 900) for every page check: its HTTP cache
    keeps the theme's scripts, styles and fonts, which a fresh context would fetch and compile again."""
    shared = browser.new_context(viewport={"width": 1280, "height": 900})
    yield shared
    shared.close()


def pages(site: Path) -> list[str]:
    return sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*.html")
        if not p.relative_to(site).as_posix().startswith(("_static/", "_sources/", "_images/", "_downloads/"))
    )


class Links(HTMLParser):
    """Every href/src of a page, and the ids it defines (targets of #fragments)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, url)
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value:
                self.links.append((tag, name, value))


@functools.cache
def parsed(path: Path) -> Links:
    parser = Links()
    parser.feed(path.read_text(errors="replace"))
    return parser


def test_every_page_loads_without_console_errors_or_remote_requests(site, served, context):
    remote: list[str] = []

    def only_local(request) -> None:  # the site must work offline: nothing may come from the net
        if urlsplit(request.url).hostname != "127.0.0.1" and not request.url.startswith("data:"):
            remote.append(request.url)

    context.on("request", only_local)  # the browser refuses them (`browser`); here they are named
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"{page.url}: console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"{page.url}: script error: {e}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{page.url}: HTTP {r.status} {r.url}"))
    # a request that never completes (aborted, refused) is a failure too: the favicon, fetched after
    # the page's load and aborted by the next navigation, was one on every page
    page.on(
        "requestfailed",
        lambda r: (
            not r.url.startswith("data:")
            and urlsplit(r.url).hostname == "127.0.0.1"
            and problems.append(f"{page.url}: failed request {r.url} ({r.failure})")
        ),
    )
    every = pages(site)
    assert len(every) > 40
    assert '<link rel="icon" href="data:image/svg+xml;base64,' in (site / "index.html").read_text()
    for name in every:
        page.goto(f"{served}/{name}", wait_until="load")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.goto(f"{served}/index.html", wait_until="load")
    page.screenshot(path=str(SHOTS / "front_page.png"), full_page=True)
    page.goto(f"{served}/auto_examples/plot_sweep_report.html", wait_until="load")
    page.screenshot(path=str(SHOTS / "gallery_sweep_report.png"), full_page=True)
    page.close()
    context.remove_listener("request", only_local)
    assert not problems, "\n".join(problems[:20])
    assert not remote, f"remote requests: {remote[:10]}"
    assert (SHOTS / "front_page.png").stat().st_size > 10_000


def test_search_finds_impact_ratio(served, context):
    page = context.new_page()
    page.goto(f"{served}/search.html?q=impact+ratio", wait_until="load")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(timeout=30_000)
    found = results.all_inner_texts()
    assert any("Estimands" in text for text in found), found
    page.close()


GALLERY = [
    "plot_forest",
    "plot_sweep_report",
    "plot_panel_chart",
    "plot_ll144_chart",
    "plot_population_diagnostics",
    "plot_ranking",
    "plot_sfm_paths",
]


@pytest.mark.parametrize("example", GALLERY)
def test_gallery_example_shows_its_figures(site, served, context, example):
    html = site / "auto_examples" / f"{example}.html"
    images = [url for tag, _, url in parsed(html).links if tag == "img" and "sphx_glr_" + example in url]
    assert images, f"{example}: no figure on the page"
    for url in images:
        assert (html.parent / url).stat().st_size > 5_000, url  # a real PNG, not an empty canvas
    page = context.new_page()
    page.goto(f"{served}/auto_examples/{example}.html", wait_until="load")
    widths = page.eval_on_selector_all(
        f"img[src*='sphx_glr_{example}']", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)"
    )
    page.close()
    assert widths and min(widths) > 100, widths
    assert 'class="sphx-glr-script-out' in html.read_text()  # it ran at build time: its output is shown


def test_no_broken_internal_links(site):
    broken = []
    for name in pages(site):
        path = site / name
        for tag, attribute, url in parsed(path).links:
            parts = urlsplit(url)
            if parts.scheme in ("http", "https", "mailto"):
                # pages may link out; the assets a page loads must be local (test above, offline)
                assert tag == "a", f"{name}: <{tag} {attribute}={url}> loads from the net"
                continue
            if parts.scheme or url.startswith("#") and not url[1:]:
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{name}: {url}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in parsed(target).ids:
                broken.append(f"{name}: {url} (no id {parts.fragment!r})")
    assert not broken, "\n".join(broken[:30])


def _keys(node: object, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{prefix}{key}"
            if key != "defaults":
                yield from _keys(value, f"{prefix}{key}.")


def _text(path: Path) -> str:
    text = html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))
    return re.sub(r"\s+", " ", text.translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"")))  # smartquotes


def test_reference_has_every_config_group_option_and_key(site):
    conf = ROOT / "conf"
    folders = sorted({p.parent for p in conf.rglob("*.yaml")} - {conf})
    assert len(folders) >= 10
    for folder in folders:
        group = folder.relative_to(conf).as_posix()
        if group == "hydra/help":  # the --help text itself: the CLI page shows it
            continue
        text = _text(site / "reference" / "config" / f"{group.replace('/', '_')}.html")
        for option in sorted(folder.glob("*.yaml")):
            assert f"{group}={option.stem}" in text, f"{group}={option.stem} missing from the config reference"
            for key in _keys(yaml.safe_load(option.read_text()) or {}):
                # keys inside a flow mapping ({provider: ..., model: ...}) show in the value of its key
                parts = key.split(".")
                shown = any(".".join(parts[:i]) in text for i in range(len(parts), 0, -1))
                assert shown and f"{parts[-1]}:" in text or key in text, f"{group}={option.stem}: key {key} missing"
    top = _text(site / "reference" / "config" / "index.html")
    for key in _keys(yaml.safe_load((conf / "config.yaml").read_text())):
        assert key in top, f"config.yaml key {key} missing"


def test_reference_has_every_public_api_name_and_cli_tool(site):
    import popfair

    api = _text(site / "reference" / "api" / "index.html")
    for name in popfair.__all__:
        assert name in api, f"popfair.{name} missing from the API reference"
        if name != "__version__":
            page = site / "reference" / "api" / "generated" / f"popfair.{name}.html"
            assert page.exists(), f"no API page for popfair.{name}"
            doc = (getattr(popfair, name).__doc__ or "").strip().splitlines()[0]
            assert _text(page).count(doc.split("`")[0][:40]) >= 1, f"popfair.{name}: docstring not rendered"
    cli = _text(site / "reference" / "cli.html")
    for tool in ("popfair", "popfair-report", "popfair-export", "popfair-data"):
        assert f"$ {tool} --help" in cli
    assert "usage: popfair-report" in cli and "usage: popfair-data pums" in cli
    benchmarks = _text(site / "reference" / "benchmarks.html")
    for script in sorted((ROOT / "benchmarks").glob("[!_]*.py")):
        assert f"python benchmarks/{script.name}" in benchmarks, f"{script.name} missing from the benchmarks page"


def _plain(text: str) -> str:
    """Text as a reader sees it, for comparing a comment with its rendered paragraph."""
    text = text.replace("---", "\u2014").replace("--", "\u2013").replace("...", "\u2026")  # smartquotes
    text = text.translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"", "`*\\"))
    return " ".join(text.split())


def _expected_entries() -> dict[str, list[tuple[str, str]]]:
    """Per config page: (key, comment) of every entry, in order, from the YAML files themselves."""
    sys.path.insert(0, str(DOCS / "_ext"))
    import popfair_docs as gen

    pages: dict[str, list[tuple[str, str]]] = {}
    groups = {
        **gen.config_groups(),
        **{g: sorted(p.stem for p in (gen.CONF / g).glob("*.yaml")) for g in gen.HYDRA_GROUPS},
    }
    for group, options in groups.items():
        entries = []
        for option in options:
            keys = gen.config_keys((gen.CONF / group / f"{option}.yaml").read_text())
            entries += [(e.key.path, e.key.comment) for e in gen._entries(keys)]
        pages[f"{group.replace('/', '_')}.html"] = entries
    top = gen._entries(gen.config_keys((gen.CONF / "config.yaml").read_text()))
    pages["index.html"] = [(e.key.path, e.key.comment) for e in top]
    return pages


def test_config_reference_is_readable_at_1280_px(site, served, context):
    """Every config page at 1280 px: no table wider than the page column, and every key with its
    explanation on screen inside the column (nothing clipped, nothing to scroll sideways to)."""
    page = context.new_page()
    problems: list[str] = []
    expected = _expected_entries()
    assert sum(len(v) for v in expected.values()) > 500
    for name, entries in expected.items():
        page.goto(f"{served}/reference/config/{name}", wait_until="load")
        found = page.evaluate(
            """() => {
              const article = document.querySelector('.bd-article');
              const column = article.getBoundingClientRect();
              const tables = [...article.querySelectorAll('table')].map(t => ({
                wide: t.scrollWidth > t.clientWidth + 1 || t.getBoundingClientRect().right > column.right + 1}));
              const keys = [...article.querySelectorAll('.config-keys > ul > li')].map(li => {
                const box = li.getBoundingClientRect();
                const explanation = li.querySelector(':scope > p + p');
                const e = explanation ? explanation.getBoundingClientRect() : null;
                return {
                  key: li.querySelector(':scope > p > code').innerText,
                  comment: explanation ? explanation.innerText : '',
                  inside: box.left >= column.left - 1 && box.right <= column.right + 1 && li.scrollWidth <= li.clientWidth + 1,
                  shown: !explanation || (explanation.checkVisibility() && e.width > 0 && e.height > 0
                                          && e.left >= column.left - 1 && e.right <= column.right + 1),
                };
              });
              return {width: column.width, tables, keys, overflow: document.documentElement.scrollWidth > window.innerWidth};
            }"""
        )
        assert found["width"] > 500, (name, found["width"])
        if found["overflow"]:
            problems.append(f"{name}: the page scrolls sideways")
        problems += [f"{name}: a table wider than its column" for t in found["tables"] if t["wide"]]
        keys = found["keys"]
        if [k["key"] for k in keys] != [key for key, _ in entries]:
            shown_keys = [k["key"] for k in keys]
            at = next(
                (i for i, (a, b) in enumerate(zip(shown_keys, entries)) if a != b[0]), min(len(keys), len(entries))
            )
            problems.append(
                f"{name}: {len(keys)} keys shown, {len(entries)} in conf/; first difference at {at}: "
                f"{shown_keys[at : at + 2]} vs {[k for k, _ in entries[at : at + 2]]}"
            )
            continue
        for shown, (key, comment) in zip(keys, entries):
            if not shown["inside"]:
                problems.append(f"{name}: {key} overflows the page column")
            if not shown["shown"]:
                problems.append(f"{name}: the explanation of {key} is not visible")
            if _plain(shown["comment"]) != _plain(comment):
                problems.append(f"{name}: {key}: explanation {shown['comment'][:60]!r} is not {comment[:60]!r}")
    page.close()
    assert not problems, "\n".join(problems[:30])


API = HTML / "reference" / "api" / "generated"


def test_api_pages_link_return_types_settings_and_concepts(site):
    import popfair

    links = {
        name: {urlsplit(url).path for tag, _, url in parsed(API / f"popfair.{name}.html").links if tag == "a"}
        for name in popfair.__all__
        if name != "__version__"
    }
    assert {"popfair.estimate.ImpactRatios.html", "popfair.ImpactRatioSettings.html"} <= links["impact_ratios"]
    assert "popfair.PseResult.html" in links["estimate_pse"] and "popfair.PseSettings.html" in links["estimate_pse"]
    assert "popfair.RatioInference.html" in links["impact_ratio_inference"]
    assert "popfair.TableSettings.html" in links["TableCase"]
    concept_pages = ("concepts/", "tables.html", "ranking.html", "tutorials/", "troubleshooting.html")
    lacking = [name for name, found in links.items() if not any(c in url for url in found for c in concept_pages)]
    assert not lacking, f"API pages without a link to a concept page: {lacking}"


def test_impact_ratios_result_has_its_page(site):
    page = API / "popfair.estimate.ImpactRatios.html"
    assert page.exists(), "ImpactRatios (what impact_ratios returns) has no API page"
    ids = parsed(page).ids
    for method in ("markdown", "plot", "summary", "metrics", "effects"):
        assert f"popfair.estimate.ImpactRatios.{method}" in ids, f"ImpactRatios.{method} not documented"
    text = _text(page)
    assert "The summary as Markdown" in text and "Horizontal bars of impact ratios" in text


def test_module_docstrings_referred_to_are_shown(site):
    import importlib

    import popfair

    referring = [
        n for n in popfair.__all__ if n != "__version__" and "module docstring" in (getattr(popfair, n).__doc__ or "")
    ]
    assert {"TableCase", "RankingEstimator", "parse_ranking"} <= set(referring)
    for name in referring:
        module = importlib.import_module(popfair._EXPORTS[name].partition(":")[0])
        first = " ".join(module.__doc__.split("\n\n")[0].split())[:60].split("`")[0]
        text = _text(API / f"popfair.{name}.html")
        assert f"Module docstring: {module.__name__}" in text, f"popfair.{name}: its module's docstring is not shown"
        assert first in text, f"popfair.{name}: {first!r} missing"


def test_gallery_output_is_html_tables_without_progress_bars(site):
    """Output blocks show tables as HTML, never as raw Markdown, and no frozen progress bar."""
    html_tables = 0
    for example in GALLERY:
        page = (site / "auto_examples" / f"{example}.html").read_text()
        outputs = re.findall(r'<div class="highlight-none notranslate">.*?</pre>', page, re.S)
        for block in outputs:
            text = html.unescape(re.sub(r"<[^>]+>", "", block))
            assert not re.search(r"^\s*\|[-: |]+\|\s*$", text, re.M), f"{example}: a raw Markdown table in its output"
            assert not re.search(r"\d+%\|[^|]*\|\s*\d+/\d+", text), f"{example}: a progress bar in its output"
        html_tables += page.count('class="dataframe')
    assert html_tables >= 5


def test_concepts_show_the_path_diagram_and_aligned_equations(site, served, context):
    estimands = site / "concepts" / "estimands.html"
    images = [url for tag, _, url in parsed(estimands).links if tag == "img" and "sphx_glr_plot_sfm_paths" in url]
    assert images and (estimands.parent / images[0]).stat().st_size > 20_000, "no path diagram on the estimands page"
    page = context.new_page()  # 1280 x 900
    page.goto(f"{served}/concepts/estimands.html", wait_until="load")
    rows = page.eval_on_selector_all(
        "mtable.ams-align > mtr",
        """rows => rows.map(r => { const cells = r.querySelectorAll(':scope > mtd');
             const eq = cells[1].querySelector('mo');
             return {name: cells[0].textContent.trim(), lhs: cells[0].getBoundingClientRect().right,
                     eq: eq.textContent, eqx: eq.getBoundingClientRect().left}; })""",
    )
    page.close()
    assert [r["name"] for r in rows] == ["TE", "NDE", "NIE", "BIE", "RIE"], rows
    assert all(r["eq"] == "=" for r in rows)
    xs = [r["eqx"] for r in rows]
    assert max(xs) - min(xs) < 1.5, f"the = signs of TE/NDE/NIE/BIE/RIE do not line up: {xs}"


def test_copy_buttons_changelog_and_compare_runs_picture(site, served, context):
    page = context.new_page()  # 1280 x 900
    page.goto(f"{served}/getting_started.html", wait_until="load")
    page.locator("div.highlight pre").first.hover()
    assert page.locator("button.copybtn").count() >= 3, "no copy button on the code blocks"
    page.close()
    changelog = _text(site / "changelog.html")
    assert "Changelog" in changelog and "0.1.0" in changelog
    sweeps = site / "tutorials" / "sweeps.html"
    assert any(tag == "img" and "mlflow_compare" in url for tag, _, url in parsed(sweeps).links)
    text = _text(sweeps)
    section = text[text.index("Compare runs in the MLflow UI") :][:2500]
    assert section.count(". ") >= 5 and "Show diff only" in section
