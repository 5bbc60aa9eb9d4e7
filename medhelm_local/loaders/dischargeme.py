"""DischargeMe (PhysioNet discharge-me): a folder with ``discharge.csv.gz``, ``radiology.csv.gz`` and
``discharge_target.csv.gz`` (plain ``.csv`` also accepted), joined on ``hadm_id``.

One instance per admission and target in ``loader_options.targets`` (``brief_hospital_course``,
``discharge_instructions``); id ``<hadm_id>:<target>``. Fields: ``discharge`` (the discharge summary with the
target sections' text removed, so the answer is not in the input), ``radiology`` (the admission's radiology
reports, or "None"), ``task`` (what to write). Reference: the target text. Meta: ``hadm_id``, ``target``.
Long inputs are cut to ``max_context_tokens`` (the discharge summary keeps its end, where the course is).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table, read_table_file
from medhelm_local.loaders.records import (
    RecordMapping,
    as_text,
    build_instances,
    check_columns,
    check_option_keys,
    is_blank,
    mapping_fields,
)
from medhelm_local.loaders.timeline import keep_recent_text

TASKS = {
    "brief_hospital_course": "Write the Brief Hospital Course section of this patient's discharge summary: a "
    "concise, problem-based account of the hospital stay.",
    "discharge_instructions": "Write the Discharge Instructions for this patient: a plain-language letter "
    "explaining why they were in hospital, what was done, and what to do at home.",
}
MAPPING = RecordMapping(
    id_column="id",
    fields={"discharge": "discharge", "radiology": "radiology", "task": "task"},
    reference_columns=["reference"],
    meta={"hadm_id": "hadm_id", "target": "target"},
)


def _find(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.csv.gz", f"{stem}.csv"):
        if (folder / name).is_file():
            return folder / name
    raise ExtractError(folder, f"a file named {stem}.csv.gz (or {stem}.csv) in the folder")


def _read(file: Path, columns: list[str]) -> list[Row]:
    table = Table(files=[])
    table.extend(file, read_table_file(file, "csv"))
    check_columns(table, columns)
    return table.rows


@register_loader("dischargeme_csv", gives=mapping_fields(MAPPING))
def load_dischargeme(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"targets", "max_context_tokens"})
    folder = path if path.is_dir() else path.parent
    targets = list(spec.loader_options.get("targets") or TASKS)
    unknown = [t for t in targets if t not in TASKS]
    if unknown:
        raise BadInputError(f"benchmark {spec.id}: unknown targets {unknown}; choose from {list(TASKS)}")
    budget = int(spec.loader_options.get("max_context_tokens", 12000))
    files = [_find(folder, "discharge"), _find(folder, "radiology"), _find(folder, "discharge_target")]
    discharge_rows = _read(files[0], ["hadm_id", "text"])
    radiology_rows = _read(files[1], ["hadm_id", "text"])
    target_rows = _read(files[2], ["hadm_id", *targets])

    discharge: dict[str, Row] = {}
    for row in discharge_rows:
        hadm = _hadm(row)
        if hadm in discharge:
            raise ExtractError(row.file, "one discharge summary per hadm_id", place=row.place, column="hadm_id")
        discharge[hadm] = row
    radiology: dict[str, list[str]] = defaultdict(list)
    for row in radiology_rows:
        if not is_blank(row.values.get("text")):
            radiology[_hadm(row)].append(as_text(row.values["text"]).strip())

    table = Table(files=files)
    table.headers[files[2]] = ["id", "discharge", "radiology", "task", "reference", "hadm_id", "target"]
    seen: set[str] = set()
    for row in target_rows:
        hadm = _hadm(row)
        if hadm in seen:
            raise ExtractError(row.file, "one target row per hadm_id", place=row.place, column="hadm_id")
        seen.add(hadm)
        source = discharge.get(hadm)
        if source is None:
            raise ExtractError(
                files[0],
                f"a discharge summary for the hadm_id at {row.place} of {files[2].name}",
                column="hadm_id",
            )
        text = as_text(source.values.get("text") or "")
        if not text.strip():
            raise ExtractError(files[0], "a non-empty value", place=source.place, column="text")
        gold = {t: as_text(row.values.get(t) or "").strip() for t in targets}
        for target in targets:
            if not gold[target]:
                raise ExtractError(row.file, "a non-empty value", place=row.place, column=target)
            cleaned = text
            for other in gold.values():
                cleaned = cleaned.replace(other, "")
            values: dict[str, Any] = {
                "id": f"{hadm}:{target}",
                "discharge": keep_recent_text(cleaned, budget * 2 // 3).text,
                "radiology": keep_recent_text("\n\n".join(radiology.get(hadm, [])) or "None", budget // 3).text,
                "task": TASKS[target],
                "reference": gold[target],
                "hadm_id": hadm,
                "target": target,
            }
            table.rows.append(Row(row.file, row.position, values, row.place))
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=files, skipped=skipped)


def _hadm(row: Row) -> str:
    value = row.values.get("hadm_id")
    if is_blank(value):
        raise ExtractError(row.file, "a non-empty value", place=row.place, column="hadm_id")
    return as_text(value).strip()
