"""HeadQA's native JSON: ``{"exams": {NAME: {"data": [{qid, qtext, ra, answers: [{aid, atext}]}]}}}``.

Instance id: ``<exam>:<qid>``. Fields: ``question``, ``options`` (``A. ...`` lines, answers in ``aid`` order).
Label: the letter of the right answer (``ra`` is an ``aid``). Meta: ``exam``, ``category`` (when present),
``options`` ({letter: text}). A folder may hold several JSON files (e.g. one per exam year).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Table, parse_json, read_text
from medhelm_local.loaders.records import LETTERS, RecordMapping, build_instances, check_option_keys
from medhelm_local.loaders.tabular import data_files

MAPPING = RecordMapping(
    id_column="id",
    fields={"question": "question"},
    options_column="options",
    answer_column="answer",
    answer_format="letter",
    meta={"exam": "exam", "category": "category"},
)


def _rows(file: Path) -> list[dict[str, Any]]:
    data = parse_json(file, read_text(file))
    exams = data.get("exams") if isinstance(data, dict) else None
    if not isinstance(exams, dict) or not exams:
        raise ExtractError(file, "a JSON object with a non-empty 'exams' object", column="exams")
    rows: list[dict[str, Any]] = []
    for number, (exam, content) in enumerate(exams.items()):
        items = content.get("data") if isinstance(content, dict) else None
        if not isinstance(items, list):
            raise ExtractError(file, f"exam number {number} (0-based, in file order) to hold a 'data' array",
                               column="data")
        for item in items:
            row = len(rows)
            if not isinstance(item, dict):
                raise ExtractError(file, "a question object", row=row)
            for key in ("qid", "qtext", "ra", "answers"):
                if key not in item:
                    raise ExtractError(file, f"the key {key!r}", row=row, column=key)
            answers = item["answers"]
            if not isinstance(answers, list) or not answers or len(answers) > len(LETTERS):
                raise ExtractError(file, "a non-empty list of answers", row=row, column="answers")
            try:
                ordered = sorted(answers, key=lambda a: int(a["aid"]))
                texts = [str(a["atext"]) for a in ordered]
                aids = [int(a["aid"]) for a in ordered]
            except (KeyError, TypeError, ValueError):
                raise ExtractError(
                    file, "answers with an integer 'aid' and an 'atext'", row=row, column="answers"
                ) from None
            try:
                right = aids.index(int(item["ra"]))
            except (TypeError, ValueError):
                raise ExtractError(file, "'ra' to be the aid of one of the answers", row=row, column="ra") from None
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
    return rows


@register_loader("headqa_json")
def load_headqa(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, set())
    table = Table(files=[])
    for file in data_files(path, "*.json"):
        rows = _rows(file)
        table.extend(file, list(rows[0]) if rows else ["id", "question", "options", "answer", "exam"], rows)
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
