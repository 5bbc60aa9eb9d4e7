"""MTSamples: a folder (searched recursively) of ``.txt`` transcribed reports, one report per file.

The reference is the first of ``loader_options.sections`` (default PLAN, SUMMARY, FINDINGS) that the report
has; that section is removed from the report, which becomes the ``context`` field, and ``section`` holds its
name. Reports with none of the sections are skipped and counted. Instance id: the file's path relative to the
folder, without ``.txt``. Meta: ``section``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table, read_text
from medhelm_local.loaders.records import RecordMapping, build_instances, check_option_keys

DEFAULT_SECTIONS = ("PLAN", "SUMMARY", "FINDINGS")
# A heading: an upper-case label at the start of a line, then a colon (MTSamples writes "PLAN:" or "PLAN:,").
HEADING = re.compile(r"^[ \t]*([A-Z][A-Z0-9 /&(),'-]{1,80}?)[ \t]*:[ \t,]*", re.MULTILINE)
MAPPING = RecordMapping(
    id_column="id",
    fields={"context": "context", "section": "section"},
    reference_columns=["reference"],
    meta={"section": "section"},
)


def split_sections(text: str) -> list[tuple[str | None, int, int, int]]:
    """(heading, start of heading, start of body, end of body) for each section; a preamble has no heading."""
    marks = list(HEADING.finditer(text))
    sections: list[tuple[str | None, int, int, int]] = []
    if not marks or marks[0].start() > 0:
        sections.append((None, 0, 0, marks[0].start() if marks else len(text)))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections.append((mark.group(1).strip(), mark.start(), mark.end(), end))
    return sections


def extract_reference(text: str, wanted: list[str]) -> tuple[str, str, str] | None:
    """(section name, section body, report without the section) for the first wanted section present."""
    sections = split_sections(text)
    for name in wanted:
        for heading, start, body_start, end in sections:
            if heading is not None and heading.upper() == name.upper():
                body = text[body_start:end].strip()
                if not body:
                    continue
                remainder = (text[:start].rstrip() + "\n\n" + text[end:].lstrip()).strip()
                return name.upper(), body, remainder
    return None


@register_loader("mtsamples_txt")
def load_mtsamples(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"sections"})
    wanted = list(spec.loader_options.get("sections") or DEFAULT_SECTIONS)
    if not all(isinstance(s, str) and s.strip() for s in wanted):
        raise BadInputError(f"benchmark {spec.id}: loader option sections must be a list of section names")
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
        found = extract_reference(read_text(file).replace("\r\n", "\n"), wanted)
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
        table.headers[file] = list(row)
        table.rows.append(Row(file=file, position=0, values=row))
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
