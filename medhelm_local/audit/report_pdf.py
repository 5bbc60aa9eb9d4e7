"""The compliance report as PDF, drawn in pure Python (fpdf2: no browser in the appliance image).

The same head and tables as the console's printable page (:func:`audit.report.compliance_report`). The PDF's
built-in fonts cover Latin-1; any other character is written as ``<U+XXXX>`` so that nothing is dropped or guessed.
The document embeds no font, image, link or script, and nothing but the report's own text.
"""

from __future__ import annotations

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
            ("Last checkpoint exported off the appliance", report.last_export or "never")]


def column_widths(columns: list[str], rows: list[list[str]]) -> tuple[float, ...]:
    """Weights for the table's columns: each column's longest line (identifiers stay on one line where they can),
    at least its heading's longest word, within bounds so that no column crowds the others out."""
    widths = []
    for index, column in enumerate(columns):
        lines = [line for row in rows for line in latin1(row[index]).split("\n")]
        longest = max([len(w) for w in column.split()] + [len(line) for line in lines])
        widths.append(float(max(6, min(longest, 48))))
    return tuple(widths)


def render_pdf(report: ComplianceReport) -> bytes:
    """A4 landscape: the title, what the report covers, then each table with its columns on every page."""
    from fpdf import FPDF
    from fpdf.fonts import FontFace

    pdf = FPDF(orientation="landscape", unit="mm", format="A4")
    pdf.set_title(latin1(f"{TITLE}: {report.appliance}"))
    pdf.set_creator("medhelm-local audit report")
    pdf.set_auto_page_break(auto=True, margin=14)
    pdf.set_margins(12, 12, 12)
    pdf.alias_nb_pages()
    pdf.add_page()
    pdf.set_font(FONT, "B", 16)
    pdf.cell(0, 10, latin1(TITLE + (f" since {report.since}" if report.since else "")), new_x="LMARGIN",
             new_y="NEXT")
    pdf.set_font(FONT, size=9)
    for label, value in head_rows(report):
        pdf.set_font(FONT, "B", 9)
        pdf.cell(75, 5.5, latin1(label))
        pdf.set_font(FONT, size=9)
        pdf.cell(0, 5.5, latin1(value), new_x="LMARGIN", new_y="NEXT")
    heading = FontFace(emphasis="BOLD", fill_color=(238, 242, 246))
    for table in report.tables:
        pdf.ln(4)
        pdf.set_font(FONT, "B", 12)
        pdf.cell(0, 8, latin1(table.title), new_x="LMARGIN", new_y="NEXT")
        pdf.set_font(FONT, size=8)
        if not table.rows:
            pdf.cell(0, 5, "none", new_x="LMARGIN", new_y="NEXT")
            continue
        with pdf.table(col_widths=column_widths(table.columns, table.rows), headings_style=heading,
                       line_height=4.2, padding=1, repeat_headings=1, text_align="LEFT") as grid:
            header = grid.row()
            for column in table.columns:
                header.cell(latin1(column))
            for values in table.rows:
                row = grid.row()
                for value in values:
                    row.cell(latin1(value))
    data = pdf.output()
    return bytes(data)
