"""MTSamples: a folder (searched recursively) of ``.txt`` transcribed reports, one report per file.

The reference is the first of ``loader_options.sections`` (default PLAN, SUMMARY, FINDINGS) that the report
has; that section is removed from the report, which becomes the ``context`` field, and ``section`` holds its
name. Reports with none of the sections are skipped and counted. Instance id: the file's path relative to the
folder, without ``.txt``. Meta: ``section``.

Sections as the real files write them (raulista1997/benchmarkdata, the folders MedHELM reads): a heading is an
upper-case label and a colon, at the start of a line or in the middle of one, right after the previous section's
last sentence ("...waves bye.ALLERGIES: No known medical allergies.MEDICATIONS: None."); a section ends at the
next heading, mid-line or not, or at the file's trailing "Keywords:" line. A wanted section is a heading whose
last word is the section name ("PLAN", "ASSESSMENT AND PLAN", "GROSS OPERATIVE FINDINGS"), an exact heading
before a compound one. HELM's scenarios keep every report where "PLAN:", "SUMMARY:" or "FINDINGS:" occurs and take
the rest of that line, which swallows the sections that follow on it; this loader keeps those reports (and those
whose section starts on the next line) with the section alone as the reference, and leaves the Description and
Keywords metadata lines (which repeat the removed section or list its terms) out of the context. A report HELM's
rule keeps and the section rule does not (a heading glued to an upper-case word, "TREATMENTPLAN:") is kept with
HELM's reference, so that this loader always keeps at least the reports HELM keeps.

MedHELM parity (``loader_options.medhelm_cut``, the markers HELM's scenario cuts the report at, in its order):
``report_medhelm`` is the input HELM's scenario builds from the report (the stripped text before the first cut
marker), ``reference_medhelm`` its reference (the rest of the line after the first case-sensitive "PLAN:",
"SUMMARY:" or "FINDINGS:", in that preference) and meta ``medhelm_kept`` whether HELM's scenario keeps the report
at all (it drops a report whose reference line is empty, or where the upper-cased text has a marker and the text
itself has not: "Plan:"). Parity runs plan only the reports HELM keeps.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table, decode_utf8, read_bytes
from medhelm_local.loaders.records import RecordMapping, build_instances, check_option_keys, mapping_fields

DEFAULT_SECTIONS = ("PLAN", "SUMMARY", "FINDINGS")
# A heading: an upper-case label then a colon ("PLAN:", "PLAN:,", "FAMILY/SOCIAL HISTORY:"). It starts a line or
# follows anything that is not an upper-case letter ("bye.ALLERGIES:", "typeCOMMENT:"); it ends on a letter or a
# closing parenthesis, so times and ratios ("10:17", "1:100,000") are not headings. A short label right after a
# list number ("2. HTN: ...") is a list item, not a heading.
HEADING = re.compile(
    r"(?<![A-Z0-9&/'(-])(?<!\d[.)] )(?<!\d[.)])([A-Z][A-Z0-9 /&,'()-]*[A-Z)])[ \t]*:[ \t,]*")
# The report's own metadata lines (first lines and the trailing keywords) also end a section.
METADATA = re.compile(r"^[ \t]*(Medical Specialty|Sample Name|Description|Keywords)[ \t]*:", re.MULTILINE)
# Metadata lines left out of the context: the trailing keywords list the report's terms, and the description
# often repeats the reference section word for word.
LEAKY_METADATA = frozenset({"KEYWORDS", "DESCRIPTION"})
MAPPING = RecordMapping(
    id_column="id",
    fields={"context": "context", "section": "section"},
    reference_columns=["reference"],
    meta={"section": "section"},
)
# HELM's reference markers (mtsamples_replicate_scenario.py / mtsamples_procedures_scenario.py extract_sections),
# in its order of preference.
HELM_REFERENCE_MARKERS = ("PLAN:", "SUMMARY:", "FINDINGS:")
MEDHELM_MAPPING = MAPPING.model_copy(update={
    "optional_fields": {"report_medhelm": "report_medhelm", "reference_medhelm": "reference_medhelm"},
    "meta": {**MAPPING.meta, "medhelm_kept": "medhelm_kept"},
})


def split_sections(text: str) -> list[tuple[str | None, int, int, int]]:
    """(heading, start of heading, start of body, end of body) for each section; a preamble has no heading.
    Metadata lines are sections named by their label in upper case ("KEYWORDS")."""
    marks = sorted([(m.start(), m.end(), m.group(1).strip()) for m in HEADING.finditer(text)
                    if sum(c.isalpha() for c in m.group(1)) >= 2]
                   + [(m.start(), m.end(), m.group(1).upper()) for m in METADATA.finditer(text)])
    sections: list[tuple[str | None, int, int, int]] = []
    if not marks or marks[0][0] > 0:
        sections.append((None, 0, 0, marks[0][0] if marks else len(text)))
    for i, (start, body_start, name) in enumerate(marks):
        if i + 1 < len(marks) and marks[i + 1][0] < body_start:
            continue  # overlapping matches: the later, narrower one stands
        end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        sections.append((name, start, body_start, end))
    return sections


def _names_section(heading: str, name: str, *, exact: bool) -> bool:
    words = re.split(r"[\s/&,-]+", heading.upper().strip(" ()"))
    return heading.upper() == name if exact else bool(words) and words[-1] == name


def extract_reference(text: str, wanted: list[str]) -> tuple[str, str, str] | None:
    """(section name, section body, report without the section and its Description and Keywords lines) for the
    first wanted section present."""
    sections = split_sections(text)
    for name in (w.upper() for w in wanted):
        for exact in (True, False):
            for heading, start, body_start, end in sections:
                if heading is None or not _names_section(heading, name, exact=exact):
                    continue
                body = text[body_start:end].strip()
                if not body:
                    continue
                kept = [(s, e) for h, s, _, e in sections if h not in LEAKY_METADATA and (s, e) != (start, end)]
                remainder = "".join(text[s:e] for s, e in kept)
                return name, body, _tidy(remainder)
    return None


def helm_reference(text: str) -> str | None:
    """HELM's ``extract_sections`` then ``plan or summary or findings`` on the stripped report: the rest of the line
    after the first occurrence of the marker. None where HELM drops the report (no reference; or an IndexError,
    caught by HELM's loop, when only the upper-cased text has the marker)."""
    found: list[str] = []
    for marker in HELM_REFERENCE_MARKERS:
        if marker in text.upper():
            parts = text.split(marker)
            if len(parts) < 2:
                return None
            found.append(parts[1].split("\n", 1)[0].strip())
    return next((f for f in found if f), None)


def helm_input(text: str, cut: Sequence[str]) -> str:
    """HELM's ``remove_plan_section`` / ``remove_sections``: the text before each cut marker in turn, stripped."""
    for marker in cut:
        if marker in text:
            text = text.split(marker)[0].strip()
    return text


def helm_text(data: bytes, text: str) -> str:
    """The report as HELM's scenario reads it: universal newlines, a byte-order mark kept, then ``.strip()``."""
    bom = "\ufeff" if data.startswith(codecs.BOM_UTF8) else ""
    return (bom + text.replace("\r\n", "\n").replace("\r", "\n")).strip()


def _helm_fallback(text: str, reference: str) -> tuple[str, str, str]:
    """A report HELM keeps and the section rule does not: HELM's marker and reference line out of the context."""
    marker = next(m for m in HELM_REFERENCE_MARKERS if m in text and text.split(m)[1].split("\n", 1)[0].strip())
    start = text.index(marker)
    end = start + len(marker) + len(text[start + len(marker):].split("\n", 1)[0])
    remainder = text[:start] + text[end:]
    kept = "".join(remainder[s:e] for h, s, _, e in split_sections(remainder) if h not in LEAKY_METADATA)
    return marker.rstrip(":"), reference, _tidy(kept)


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", text)).strip()


@register_loader("mtsamples_txt", gives=mapping_fields(MAPPING))
def load_mtsamples(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"sections", "medhelm_cut"})
    wanted = list(spec.loader_options.get("sections") or DEFAULT_SECTIONS)
    if not all(isinstance(s, str) and s.strip() for s in wanted):
        raise BadInputError(f"benchmark {spec.id}: loader option sections must be a list of section names")
    cut = spec.loader_options.get("medhelm_cut")
    if cut is not None and not (isinstance(cut, list) and cut and all(isinstance(c, str) and c for c in cut)):
        raise BadInputError(f"benchmark {spec.id}: loader option medhelm_cut must be a list of markers (\"PLAN:\")")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file() and not p.name.startswith("."))
        if not files:
            raise ExtractError(path, "a folder of .txt reports")
    else:
        files = [path]
    base = path if path.is_dir() else path.parent
    table = Table(files=[])
    label = ", ".join(wanted[:-1]) + f" or {wanted[-1]}" if len(wanted) > 1 else wanted[0]
    for file in files:
        data = read_bytes(file)
        text = decode_utf8(file, data)
        helm = helm_text(data, text)
        helm_ref = helm_reference(helm)
        found = extract_reference(text.replace("\r\n", "\n"), wanted)
        if found is None and helm_ref is not None:
            found = _helm_fallback(helm, helm_ref)
        table.files.append(file)
        if found is None:
            table.skipped[f"no {label} section"] += 1
            continue
        name, body, remainder = found
        row: dict[str, Any] = {
            "id": file.relative_to(base).with_suffix("").as_posix(),
            "context": remainder,
            "section": name,
            "reference": body,
        }
        if cut is not None:
            row.update(report_medhelm=helm_input(helm, cut), reference_medhelm=helm_ref or "",
                       medhelm_kept=helm_ref is not None)
        table.headers[file] = list(row)
        table.rows.append(Row(file=file, position=0, values=row, place=None))
    instances, skipped = build_instances(spec, table, MAPPING if cut is None else MEDHELM_MAPPING)
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
