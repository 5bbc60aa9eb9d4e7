"""The compliance report as PDF, drawn in pure Python (fpdf2: no browser in the appliance image).

The same head and tables as the console's printable page (:func:`audit.report.compliance_report`). The PDF's
built-in fonts cover Latin-1; any other character is written as ``<U+XXXX>`` so that nothing is dropped or guessed.
The document embeds no font, image, link or script, and nothing but the report's own text.
"""

from __future__ import annotations

from typing import Any

from medhelm_local.audit.report import ComplianceReport

TITLE = "Compliance report"
FONT = "Helvetica"


def latin1(text: str) -> str:
    """``text`` in the core fonts' Latin-1, every other character spelled ``<U+XXXX>``."""
    return "".join(c if ord(c) < 256 else f"<U+{ord(c):04X}>" for c in text)


def head_rows(report: ComplianceReport) -> list[tuple[str, str]]:
    return [("Appliance", report.appliance), ("Generated (UTC)", report.generated),
            ("Records covered", str(report.records) + (f" since {report.since}" if report.since else "")),
            ("Last signed checkpoint", report.last_checkpoint or "none"),
            ("Last checkpoint exported off the appliance", report.last_export or "never"),
            *([("Trail integrity", report.integrity.text)] if report.integrity is not None else []),
            *([("Records left out", f"{report.unreadable}, not of the form the appliance writes: run audit verify")]
              if report.unreadable else [])]


def column_widths(columns: list[str], rows: list[list[str]]) -> tuple[float, ...]:
    """Weights for the table's columns: each column's longest line (identifiers stay on one line where they can),
    at least its heading's longest word, within bounds so that no column crowds the others out."""
    widths = []
    for index, column in enumerate(columns):
        lines = [line for row in rows for line in latin1(row[index]).split("\n")]
        longest = max([len(w) for w in column.split()] + [len(line) for line in lines])
        widths.append(float(max(6, min(longest, 48))))
    return tuple(widths)


def wrap(pdf: Any, text: str, width: float) -> list[str]:
    """``text`` broken into lines no wider than ``width`` (mm) in the current font: at its line breaks, then
    between words, and inside a word too long for a line."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if pdf.get_string_width(candidate) <= width:
                line = candidate
                continue
            if line:
                lines.append(line)
            line = ""
            for char in word:
                if line and pdf.get_string_width(line + char) > width:
                    lines.append(line)
                    line = ""
                line += char
        lines.append(line)
    return lines


class _Grid:
    """A bordered table drawn cell by cell (fpdf2's own table lays out every cell twice: too slow for a trail of
    thousands of records), its heading repeated at the top of every page it spans."""

    PAD = 1.0
    LINE = 3.8

    def __init__(self, pdf: Any, columns: list[str], rows: list[list[str]]) -> None:
        self.pdf = pdf
        weights = column_widths(columns, rows)
        self.widths = [pdf.epw * w / sum(weights) for w in weights]
        self.columns = columns

    def _row(self, values: list[str], *, heading: bool = False) -> None:
        pdf = self.pdf
        pdf.set_font(FONT, "B" if heading else "", 8)
        cells = [wrap(pdf, latin1(v), w - 2 * self.PAD) for v, w in zip(values, self.widths, strict=True)]
        height = max(len(lines) for lines in cells) * self.LINE + 2 * self.PAD
        if pdf.get_y() + height > pdf.page_break_trigger and not heading:
            pdf.add_page()
            self._row(self.columns, heading=True)
            pdf.set_font(FONT, size=8)
        x, y = pdf.l_margin, pdf.get_y()
        for lines, width in zip(cells, self.widths, strict=True):
            if heading:
                pdf.set_fill_color(238, 242, 246)
            pdf.rect(x, y, width, height, style="DF" if heading else "D")
            for index, line in enumerate(lines):
                pdf.text(x + self.PAD, y + self.PAD + (index + 0.8) * self.LINE, line)
            x += width
        pdf.set_xy(pdf.l_margin, y + height)

    def draw(self, rows: list[list[str]]) -> None:
        self.pdf.set_draw_color(190, 198, 207)
        self._row(self.columns, heading=True)
        for values in rows:
            self._row(values)


def render_pdf(report: ComplianceReport) -> bytes:
    """A4 landscape: the title, what the report covers, then each table with its columns on every page."""
    from fpdf import FPDF

    pdf = FPDF(orientation="landscape", unit="mm", format="A4")
    pdf.set_title(latin1(f"{TITLE}: {report.appliance}"))
    pdf.set_creator("medhelm-local audit report")
    pdf.set_auto_page_break(auto=False, margin=14)
    pdf.set_margins(12, 12, 12)
    pdf.add_page()
    pdf.set_font(FONT, "B", 16)
    pdf.cell(0, 10, latin1(TITLE + (f" since {report.since}" if report.since else "")), new_x="LMARGIN",
             new_y="NEXT")
    for label, value in head_rows(report):
        pdf.set_font(FONT, "B", 9)
        pdf.cell(75, 5.5, latin1(label))
        pdf.set_font(FONT, size=9)
        pdf.multi_cell(0, 5.5, latin1(value), new_x="LMARGIN", new_y="NEXT")  # a verdict may take two lines
    for table in report.tables:
        if pdf.get_y() + 24 > pdf.page_break_trigger:  # a title with at least its heading and a row
            pdf.add_page()
        pdf.ln(4)
        pdf.set_font(FONT, "B", 12)
        pdf.cell(0, 8, latin1(table.title), new_x="LMARGIN", new_y="NEXT")
        pdf.set_font(FONT, size=8)
        if not table.rows:
            pdf.cell(0, 5, "none", new_x="LMARGIN", new_y="NEXT")
            continue
        _Grid(pdf, table.columns, table.rows).draw(table.rows)
    return bytes(pdf.output())
