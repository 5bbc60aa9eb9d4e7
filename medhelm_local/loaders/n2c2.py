"""n2c2 2018 Track 1 (cohort selection): a folder of ``<PatientMatching>`` XML files, one per patient, with the
records in ``<TEXT>`` and one ``<TAGS>`` child per criterion whose ``met`` attribute is ``met`` / ``not met``.

One instance per patient and criterion; id ``<file stem>:<CRITERION>``. Fields: ``context`` (the records,
keeping the most recent part within ``max_context_tokens``), ``criterion`` (the criterion's definition).
Label: ``yes`` (met) or ``no`` (not met). Meta: ``patient`` (file stem), ``criterion`` (tag name).
"""

from __future__ import annotations

from pathlib import Path

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table
from medhelm_local.loaders.mediqa import parse_xml
from medhelm_local.loaders.records import RecordMapping, build_instances, check_option_keys, mapping_fields
from medhelm_local.loaders.tabular import data_files
from medhelm_local.loaders.timeline import keep_recent_text

# The 13 criteria of the n2c2 2018 cohort-selection task, as defined by the organisers.
CRITERIA = {
    "ABDOMINAL": "History of intra-abdominal surgery, small or large intestine resection, or small bowel obstruction.",
    "ADVANCED-CAD": "Advanced cardiovascular disease: two or more of taking two or more medications to treat CAD, "
    "history of myocardial infarction, currently experiencing angina, ischemia (past or present).",
    "ALCOHOL-ABUSE": "Current alcohol use over weekly recommended limits.",
    "ASP-FOR-MI": "Use of aspirin to prevent myocardial infarction.",
    "CREATININE": "Serum creatinine above the upper limit of normal.",
    "DIETSUPP-2MOS": "Taken a dietary supplement (excluding vitamin D) in the past 2 months.",
    "DRUG-ABUSE": "Drug abuse, current or past.",
    "ENGLISH": "Patient must speak English.",
    "HBA1C": "Any hemoglobin A1c (HbA1c) value between 6.5% and 9.5%.",
    "KETO-1YR": "Diagnosis of ketoacidosis in the past year.",
    "MAJOR-DIABETES": "Major diabetes-related complication: amputation, kidney damage, skin conditions, "
    "retinopathy, nephropathy or neuropathy.",
    "MAKES-DECISIONS": "Patient must make their own medical decisions.",
    "MI-6MOS": "Myocardial infarction in the past 6 months.",
}
MAPPING = RecordMapping(
    id_column="id",
    fields={"context": "context", "criterion": "criterion"},
    label_column="met",
    meta={"patient": "patient", "criterion": "tag"},
)


@register_loader("n2c2_xml", gives=mapping_fields(MAPPING))
def load_n2c2(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"max_context_tokens"})
    budget = int(spec.loader_options.get("max_context_tokens", 12000))
    table = Table(files=[])
    for file in data_files(path, "*.xml"):
        root = parse_xml(file)
        text = root.findtext("TEXT")
        if text is None or not text.strip():
            raise ExtractError(file, "a non-empty <TEXT> element", column="TEXT")
        tags = root.find("TAGS")
        if tags is None or len(tags) == 0:
            raise ExtractError(file, "a <TAGS> element with one child per criterion", column="TAGS")
        context = keep_recent_text(text.strip(), budget).text
        table.files.append(file)
        table.headers[file] = ["id", "context", "criterion", "met", "patient", "tag"]
        for position, tag in enumerate(tags):
            place = Place.record(position + 1, "criterion tag")
            definition = CRITERIA.get(tag.tag)
            if definition is None:
                raise ExtractError(file, f"a criterion tag among {', '.join(CRITERIA)}", place=place)
            met = (tag.get("met") or "").strip().lower()
            if met not in ("met", "not met"):
                raise ExtractError(file, 'met="met" or met="not met"', place=place, column=tag.tag)
            table.rows.append(
                Row(
                    file,
                    position,
                    {
                        "id": f"{file.stem}:{tag.tag}",
                        "context": context,
                        "criterion": definition,
                        "met": "yes" if met == "met" else "no",
                        "patient": file.stem,
                        "tag": tag.tag,
                    },
                    place,
                )
            )
    instances, skipped = build_instances(spec, table, MAPPING)
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
