"""HeadQA's native JSON: ``{"exams": {NAME: {"data": [{qid, qtext, ra, answers: [{aid, atext}]}]}}}``.

Instance id: ``<exam>:<qid>``. Fields: ``question``, ``options`` (``A. ...`` lines, answers in ``aid`` order).
Label: the letter of the right answer (``ra`` is an ``aid``). Meta: ``exam``, ``category`` (when present),
``options`` ({letter: text}). A folder may hold several JSON files (e.g. one per exam year).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import FileRows, Table, numbered, parse_json, read_text
from medhelm_local.loaders.records import LETTERS, RecordMapping, build_instances, check_option_keys, mapping_fields
from medhelm_local.loaders.tabular import data_files

MAPPING = RecordMapping(
    id_column="id",
    fields={"question": "question"},
    options_column="options",
    answer_column="answer",
    answer_format="letter",
    meta={"exam": "exam", "category": "category"},
)


def _rows(file: Path) -> FileRows:
    data = parse_json(file, read_text(file))
    exams = data.get("exams") if isinstance(data, dict) else None
    if not isinstance(exams, dict) or not exams:
        raise ExtractError(file, "a JSON object with a non-empty 'exams' object", column="exams")
    rows: list[dict[str, Any]] = []
    for number, (exam, content) in enumerate(exams.items(), start=1):
        items = content.get("data") if isinstance(content, dict) else None
        if not isinstance(items, list):
            raise ExtractError(file, "a 'data' array in each exam", place=Place.record(number, "exam"), column="data")
        for item in items:
            place = Place.record(len(rows) + 1, "question")
            if not isinstance(item, dict):
                raise ExtractError(file, "a question object", place=place)
            for key in ("qid", "qtext", "ra", "answers"):
                if key not in item:
                    raise ExtractError(file, f"the key {key!r}", place=place, column=key)
            answers = item["answers"]
            if not isinstance(answers, list) or not answers or len(answers) > len(LETTERS):
                raise ExtractError(file, "a non-empty list of answers", place=place, column="answers")
            try:
                ordered = sorted(answers, key=lambda a: int(a["aid"]))
                texts = [str(a["atext"]) for a in ordered]
                aids = [int(a["aid"]) for a in ordered]
            except (KeyError, TypeError, ValueError):
                raise ExtractError(
                    file, "answers with an integer 'aid' and an 'atext'", place=place, column="answers"
                ) from None
            try:
                right = aids.index(int(item["ra"]))
            except (TypeError, ValueError):
                raise ExtractError(file, "'ra' to be the aid of one of the answers", place=place, column="ra") from None
            rows.append(
                {
                    "id": f"{exam}:{item['qid']}",
                    "question": item["qtext"],
                    "options": texts,
                    "answer": LETTERS[right],
                    "exam": exam,
                    "category": item.get("category"),
                }
            )
    return FileRows(list(rows[0]) if rows else ["id", "question", "options", "answer", "exam"], rows,
                    numbered(rows, "question"))


@register_loader("headqa_json", gives=mapping_fields(MAPPING))
def load_headqa(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, set())
    table = Table(files=[])
    for file in data_files(path, "*.json"):
        table.extend(file, _rows(file))
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
