"""Reports as a list of blocks, written three ways: Markdown, one self-contained HTML page (figures
embedded as base64 PNG) and PDF (reportlab), so the sweep report and the auditor's report share one
renderer and a table reads the same in each.

Blocks: "h2" / "h3" headings, "text" (paragraphs separated by blank lines), "list" (bullet items),
"facts" (label -> value pairs, e.g. the audited tool and the audit date), "table" (a DataFrame;
numeric columns right-aligned, header and cells alike), "figure" (a PNG file under the output folder).
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

KINDS = ("h2", "h3", "text", "list", "facts", "table", "figure")


@dataclass
class Block:
    """One piece of a report: a heading, a paragraph, a list, facts, a table or a figure."""

    kind: str  # one of KINDS
    content: Any  # str | list[str] | dict[str, str] | DataFrame | Path
    caption: str = ""  # tables and figures: one line under them


def cell(value: Any) -> str:
    """A table cell as text: floats to 4 significant digits, missing values blank."""
    if isinstance(value, float | np.floating):
        return "" if np.isnan(value) else f"{value:.4g}"
    return "" if value is None or value is pd.NA else str(value)


_NUMBER = r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?%?"
NUMERIC_TEXT = re.compile(f"{_NUMBER}(\u2013{_NUMBER})?")


def numeric_columns(table: pd.DataFrame) -> list[bool]:
    """Which columns read as numbers (right-aligned): numeric dtypes, or text that is all numbers,
    percentages or blanks (pre-formatted figures), or ranges of them (0.61\u20130.98); "not identified"
    stands where a number would. Plain Python over the cells: report tables are small, and pandas'
    string methods cost more per call than these tables take to scan."""
    out = []
    for column in table.columns:
        values = table[column]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            out.append(True)
            continue
        filled = [t for t in (cell(v).strip() for v in values) if t and t != "not identified"]
        out.append(bool(filled) and all(NUMERIC_TEXT.fullmatch(t) for t in filled))
    return out


def markdown_table(table: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "| " + " | ".join("---:" if right else "---" for right in numeric_columns(table)) + " |"
    body = [
        "| " + " | ".join(cell(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |"
        for row in table.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def to_markdown(title: str, blocks: list[Block], out: Path) -> str:
    parts = [f"# {title}"]
    for block in blocks:
        if block.kind in ("h2", "h3"):
            parts.append(("## " if block.kind == "h2" else "### ") + block.content)
        elif block.kind == "text":
            parts.append(block.content)
        elif block.kind == "list":
            parts.append("\n".join(f"- {item}" for item in block.content))
        elif block.kind == "facts":
            parts.append("\n".join(f"- **{label}:** {value}" for label, value in block.content.items()))
        elif block.kind == "table":
            parts.append(markdown_table(block.content))
        else:
            parts.append(f"![{block.content.stem}]({block.content.relative_to(out).as_posix()})")
        if block.caption:
            parts.append(f"*{block.caption}*")
    return "\n\n".join(parts) + "\n"


STYLE = """
body{font-family:"Helvetica Neue",Arial,sans-serif;margin:2em auto;max-width:1100px;padding:0 1.5em;
 color:#1a1a1a;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #333;padding-bottom:.2em}
h2{font-size:1.3em;margin-top:1.6em;border-bottom:1px solid #bbb}
h3{font-size:1.1em;margin-top:1.2em}
table{border-collapse:collapse;font-size:13px;margin:.6em 0 1em}
th,td{border:1px solid #c8c8c8;padding:4px 8px;vertical-align:top}
th{background:#eef0f3;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}
td.txt,th.txt{text-align:left}
table.facts{font-size:14px}table.facts th{text-align:left;background:none;border:none;padding:2px 12px 2px 0}
table.facts td{border:none;padding:2px 0}
p.caption{font-size:12px;color:#555;margin-top:-.6em}
ul{margin:.4em 0 1em 1.2em;padding:0}
code{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em;background:#f3f4f6;padding:0 .2em;
 border-radius:3px}
img{max-width:100%;margin:4px 0}
@media print{body{margin:0;max-width:none}h2,h3{break-after:avoid}table,img{break-inside:avoid}}
"""


CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> str:
    """Escaped HTML of a paragraph or list item, `code` spans as <code> (no literal backticks)."""
    return CODE.sub(r"<code>\1</code>", html.escape(str(text)))


def _html_table(table: pd.DataFrame) -> str:
    align = ["num" if right else "txt" for right in numeric_columns(table)]
    head = "".join(f"<th class='{a}' scope='col'>{html.escape(str(c))}</th>" for c, a in zip(table.columns, align))
    rows = [
        "<tr>" + "".join(f"<td class='{a}'>{html.escape(cell(v))}</td>" for v, a in zip(row, align)) + "</tr>"
        for row in table.itertuples(index=False)
    ]
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def to_html(title: str, blocks: list[Block]) -> str:
    """One self-contained page: tables inline, figures as base64 data URIs."""
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
    ]
    for block in blocks:
        if block.kind in ("h2", "h3"):
            parts.append(f"<{block.kind}>{html.escape(block.content)}</{block.kind}>")
        elif block.kind == "text":
            parts += [f"<p>{_inline(p.strip())}</p>" for p in str(block.content).split("\n\n") if p.strip()]
        elif block.kind == "list":
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block.content) + "</ul>")
        elif block.kind == "facts":
            rows = "".join(
                f"<tr><th scope='row'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                for k, v in block.content.items()
            )
            parts.append(f"<table class='facts'>{rows}</table>")
        elif block.kind == "table":
            parts.append(_html_table(block.content))
        else:
            data = base64.b64encode(Path(block.content).read_bytes()).decode()
            parts.append(f"<img alt='{html.escape(block.content.stem)}' src='data:image/png;base64,{data}'>")
        if block.caption:
            parts.append(f"<p class='caption'>{html.escape(block.caption)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def to_pdf(title: str, blocks: list[Block], footer: str = "") -> bytes:
    """A4 PDF of the blocks (reportlab): wide tables shrink their font to fit the page width, every
    heading stays on the page of what follows it, and each page's foot carries `footer` (default the
    title) and "page i of n"."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.units import cm
    from reportlab.platypus import (
        Image,
        KeepTogether,
        ListFlowable,
        ListItem,
        Paragraph,
        SimpleDocTemplate,
        Spacer,
        Table,
        TableStyle,
    )

    styles = getSampleStyleSheet()
    width = A4[0] - 3 * cm

    def para(text: str, style: str = "BodyText") -> Paragraph:
        return Paragraph(CODE.sub(r'<font face="Courier">\1</font>', html.escape(str(text))), styles[style])

    story: list[Any] = [para(title, "Title")]
    heading: Any = None  # a heading waits for the first flowable of its section: they go on one page
    for block in blocks:
        if block.kind in ("h2", "h3"):
            parts = [para(block.content, "Heading2" if block.kind == "h2" else "Heading3")]
        elif block.kind == "text":
            parts = [para(p.strip()) for p in str(block.content).split("\n\n") if p.strip()]
        elif block.kind == "list":
            parts = [
                ListFlowable([ListItem(para(i), leftIndent=12) for i in block.content], bulletType="bullet", start="•")
            ]
        elif block.kind == "facts":
            rows = [[para(k), para(v)] for k, v in block.content.items()]
            facts = Table(rows, colWidths=[0.28 * width, 0.72 * width], hAlign="LEFT")
            facts.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP")]))
            parts = [facts]
        elif block.kind == "table":
            parts = [KeepTogether(_pdf_table(block.content, width, Table, TableStyle, colors))]
        else:
            picture = Image(str(block.content))
            scale = min(1.0, width / picture.drawWidth)
            picture.drawWidth, picture.drawHeight = picture.drawWidth * scale, picture.drawHeight * scale
            parts = [picture]
        if block.caption:
            parts.append(para(block.caption, "Italic"))
        if block.kind in ("h2", "h3"):
            heading = (heading or []) + parts  # an h3 right under an h2 waits too
            continue
        if heading and parts:
            # one level: a KeepTogether inside another measures as taller than a page and breaks one
            first = parts[0]._content if isinstance(parts[0], KeepTogether) else [parts[0]]
            parts[0] = KeepTogether([*heading, *first])
            heading = None
        story += [*parts, Spacer(1, 4)]
    story += heading or []
    buffer = io.BytesIO()
    doc = SimpleDocTemplate(
        buffer, pagesize=A4, leftMargin=1.5 * cm, rightMargin=1.5 * cm, bottomMargin=2 * cm, title=title
    )
    doc.build(story, canvasmaker=_numbered_canvas(footer or title, 1.5 * cm))
    return buffer.getvalue()


def _numbered_canvas(footer: str, margin: float) -> Any:
    """A reportlab canvas class that writes `footer` and "page i of n" at the foot of every page (the
    pages are kept until the end, when n is known)."""
    from reportlab.pdfgen.canvas import Canvas

    class NumberedCanvas(Canvas):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pages: list[dict[str, Any]] = []

        def showPage(self) -> None:  # noqa: N802 - reportlab's name
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self) -> None:
            total = len(self._pages)
            for number, state in enumerate(self._pages, start=1):
                self.__dict__.update(state)
                self.setFont("Helvetica", 8)
                self.setFillGray(0.35)
                page_width = self._pagesize[0]
                self.drawString(margin, 0.9 * margin, footer if len(footer) <= 110 else footer[:107] + "...")
                self.drawRightString(page_width - margin, 0.9 * margin, f"page {number} of {total}")
                super().showPage()
            super().save()

    return NumberedCanvas


def _pdf_table(table: pd.DataFrame, width: float, table_type: Any, style_type: Any, colors: Any) -> Any:
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.platypus import Paragraph

    columns = max(1, len(table.columns))
    size = 8.5 if columns <= 6 else 7 if columns <= 9 else 6
    right = numeric_columns(table)
    styles = [ParagraphStyle(f"c{a}", fontSize=size, leading=size + 2, alignment=2 if a else 0) for a in right]
    head = [Paragraph(f"<b>{html.escape(str(c))}</b>", style) for c, style in zip(table.columns, styles, strict=True)]
    body = [
        [Paragraph(html.escape(cell(v)), style) for v, style in zip(row, styles, strict=True)]
        for row in table.itertuples(index=False)
    ]
    widths = _column_widths(table, right, width, size)
    result = table_type([head, *body], repeatRows=1, hAlign="LEFT", colWidths=widths)
    result.setStyle(
        style_type(
            [
                ("GRID", (0, 0), (-1, -1), 0.4, colors.HexColor("#c8c8c8")),
                ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#eef0f3")),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
            ]
        )
    )
    return result


def _column_widths(table: pd.DataFrame, right: list[bool], width: float, size: float) -> list[float]:
    """Column widths in points: numbers and short words never wrap; text columns share what is left
    in proportion to their longest cell (a character is about 0.6 em, plus 12 pt of cell padding)."""
    char = 0.6 * size

    def longest(values: list[str]) -> int:
        return max([len(v) for v in values] + [1])

    words = [longest(str(c).split()) * 1.15 for c in table.columns]  # bold headers are wider
    cells = [longest([cell(v) for v in table[c]]) for c in table.columns]
    fixed = [
        max(w, n if r else longest(" ".join(cell(v) for v in table[c]).split()))
        for w, n, r, c in zip(words, cells, right, table.columns)
    ]
    need = np.array([char * f + 14 for f in fixed])
    want = np.array([char * max(w, n) + 14 for w, n in zip(words, cells)])
    spare = width - need.sum()
    if spare <= 0:
        return list(need * width / need.sum())
    grow = want - need
    if grow.sum() > 0:
        need = need + grow * min(1.0, spare / grow.sum())
    return list(need)
