"""MEDIQA 2019 QA task XML: ``<Question QID><QuestionText/><AnswerList><Answer ReferenceRank ...>``.

Instance id: the ``QID``. Field ``question``. Reference: the text of the answer with ``ReferenceRank`` 1 (the
most relevant). Meta: ``n_answers``. Questions without a rank-1 answer are skipped and counted. A folder may
hold several XML files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import FileRows, Table, read_text
from medhelm_local.loaders.records import RecordMapping, build_instances, check_option_keys, mapping_fields
from medhelm_local.loaders.tabular import data_files

MAPPING = RecordMapping(
    id_column="QID", fields={"question": "question"}, reference_columns=["answer"], meta={"n_answers": "n_answers"}
)


def parse_xml(file: Path) -> Any:
    text = read_text(file)
    try:
        return ElementTree.fromstring(text)
    except (ElementTree.ParseError, DefusedXmlException) as exc:
        position = getattr(exc, "position", None)
        where = f" (error at line {position[0]}, column {position[1]})" if position else ""
        raise ExtractError(file, f"well-formed XML{where}") from None


def _rows(file: Path, table: Table) -> None:
    root = parse_xml(file)
    rows: list[dict[str, Any]] = []
    places: list[Place] = []
    for number, question in enumerate(root.iter("Question"), start=1):
        place = Place.record(number, "Question element")
        qid = question.get("QID")
        if not qid:
            raise ExtractError(file, "a QID attribute on each Question", place=place, column="QID")
        text = (question.findtext("QuestionText") or "").strip()
        if not text:
            raise ExtractError(file, "a non-empty QuestionText", place=place, column="QuestionText")
        answers = question.findall("./AnswerList/Answer")
        best = [a for a in answers if (a.get("ReferenceRank") or "").strip() == "1"]
        if not best:
            table.skipped["no answer with ReferenceRank 1"] += 1
            continue
        answer = (best[0].findtext("AnswerText") or "").strip()
        rows.append({"QID": qid, "question": text, "answer": answer, "n_answers": len(answers)})
        places.append(place)
    if not rows and not table.skipped:
        raise ExtractError(file, "at least one Question element")
    table.extend(file, FileRows(["QID", "question", "answer", "n_answers"], rows, places))


@register_loader("mediqa_xml", gives=mapping_fields(MAPPING))
def load_mediqa(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, set())
    table = Table(files=[])
    for file in data_files(path, "*.xml"):
        _rows(file, table)
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
