"""MedAlign: a TSV of clinician instructions and responses, plus one EHR XML file per patient.

``loader_options`` (defaults in brackets): ``glob`` [``*.tsv``], ``id_column`` [``instruction_id``],
``instruction_column`` [``question``], ``reference_column`` [``clinician_response``], ``ehr_column``
[``filename``: the patient's XML file name], ``ehr_dir`` [``ehrs``: folder beside the TSV holding the XML
files; the TSV's own folder if absent], ``max_context_tokens`` [12000].

Instance id: the instruction id. Fields: ``question`` (the instruction), ``ehr`` (the XML record, well-formedness
checked, keeping its most recent part within the budget). Reference: the clinician's response; rows without
one are skipped and counted. Meta: ``ehr_file``, ``person_id`` (when the TSV has it), ``ehr_truncated``.
"""

from __future__ import annotations

from pathlib import Path

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table, read_table_file, read_text
from medhelm_local.loaders.mediqa import parse_xml
from medhelm_local.loaders.paths import confined_child
from medhelm_local.loaders.records import (
    RecordMapping,
    as_text,
    build_instances,
    check_columns,
    check_option_keys,
    is_blank,
    mapping_fields,
)
from medhelm_local.loaders.tabular import data_files
from medhelm_local.loaders.timeline import keep_recent_text

MAPPING = RecordMapping(
    id_column="id",
    fields={"question": "question", "ehr": "ehr"},
    reference_columns=["reference"],
    meta={"ehr_file": "ehr_file", "person_id": "person_id", "ehr_truncated": "ehr_truncated"},
    skip_blank_rows=False,
)


@register_loader("medalign_tsv", gives=mapping_fields(MAPPING))
def load_medalign(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(
        spec,
        {"glob", "id_column", "instruction_column", "reference_column", "ehr_column", "ehr_dir", "max_context_tokens"},
    )
    options = spec.loader_options
    id_column = str(options.get("id_column", "instruction_id"))
    instruction = str(options.get("instruction_column", "question"))
    reference = str(options.get("reference_column", "clinician_response"))
    ehr_column = str(options.get("ehr_column", "filename"))
    budget = int(options.get("max_context_tokens", 12000))
    files = data_files(path, str(options.get("glob", "*.tsv")))
    if len(files) != 1:
        raise ExtractError(path, "exactly one instruction TSV file in the folder")
    tsv = files[0]
    ehr_dir = confined_child(tsv.parent, options.get("ehr_dir", "ehrs"), "ehr_dir")
    if not ehr_dir.is_dir():
        ehr_dir = tsv.parent
    source = Table(files=[])
    source.extend(tsv, read_table_file(tsv, "tsv"))
    check_columns(source, [id_column, instruction, reference, ehr_column])

    table = Table(files=[tsv])
    table.headers[tsv] = ["id", "question", "ehr", "reference", "ehr_file", "person_id", "ehr_truncated"]
    ehr_cache: dict[str, tuple[str, int]] = {}
    used: list[Path] = []
    for row in source.rows:
        if all(is_blank(v) for v in row.values.values()):
            table.skipped["blank row"] += 1
            continue
        if is_blank(row.values.get(reference)):
            table.skipped["no clinician response"] += 1
            continue
        if is_blank(row.values.get(id_column)):
            raise ExtractError(tsv, "a non-empty value", place=row.place, column=id_column)
        name = as_text(row.values.get(ehr_column) or "").strip()
        if not name:
            raise ExtractError(tsv, "a non-empty value", place=row.place, column=ehr_column)
        ehr_file = (ehr_dir / name).resolve()
        if ehr_dir.resolve() not in ehr_file.parents:
            raise ExtractError(tsv, "a file name inside the EHR folder", place=row.place, column=ehr_column)
        if name not in ehr_cache:
            if not ehr_file.is_file():
                raise ExtractError(
                    tsv, f"an EHR file that exists in {ehr_dir.name}/", place=row.place, column=ehr_column
                )
            parse_xml(ehr_file)
            truncated = keep_recent_text(read_text(ehr_file).strip(), budget)
            ehr_cache[name] = (truncated.text, truncated.dropped)
            used.append(ehr_file)
        text, dropped = ehr_cache[name]
        table.rows.append(
            Row(
                tsv,
                row.position,
                {
                    "id": row.values.get(id_column),
                    "question": row.values.get(instruction),
                    "ehr": text,
                    "reference": row.values.get(reference),
                    "ehr_file": name,
                    "person_id": row.values.get("person_id"),
                    "ehr_truncated": dropped > 0,
                },
                row.place,
            )
        )
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=[tsv, *used], skipped=skipped)
