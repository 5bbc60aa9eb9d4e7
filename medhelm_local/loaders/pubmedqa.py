"""PubMedQA's native ``ori_pqal.json``: ``{PMID: {QUESTION, CONTEXTS, LABELS, final_decision, ...}}``.

Fields: ``context`` (the abstract's paragraphs), ``question``, ``labelled_context`` (``<Label>. <paragraph>``
lines, MedHELM's rendering).
"""

from __future__ import annotations

from pathlib import Path

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders.base import LoadResult, canonical_label, register_loader
from medhelm_local.loaders.io import parse_json, read_text
from medhelm_local.records import LABEL, REFERENCES, Instance


def labelled_context(labels: object, contexts: list[str]) -> str:
    """``<Label>. <context>`` lines (``Background. ...``), as MedHELM's PubMedQA prompt shows the abstract."""
    if not isinstance(labels, list) or len(labels) != len(contexts):
        return "\n".join(contexts)
    return "\n".join(f"{str(label).title()}. {context}" for label, context in zip(labels, contexts, strict=True))


@register_loader("pubmedqa_json", gives=frozenset({LABEL, REFERENCES}))  # as built below
def load_pubmedqa(spec: BenchmarkSpec, path: Path) -> LoadResult:
    file = path / "ori_pqal.json" if path.is_dir() else path
    data = parse_json(file, read_text(file))
    if not isinstance(data, dict):
        raise ExtractError(file, "a JSON object keyed by PMID")
    instances = []
    for number, (pmid, item) in enumerate(data.items(), start=1):
        place = Place.record(number, "entry")
        if not isinstance(item, dict):
            raise ExtractError(file, "an object per PMID", place=place)
        for key in ("QUESTION", "CONTEXTS", "final_decision"):
            if key not in item:
                raise ExtractError(file, f"key {key!r} in each PMID's entry", place=place, column=key)
        contexts = item["CONTEXTS"]
        if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
            raise ExtractError(file, "a list of strings", place=place, column="CONTEXTS")
        if not isinstance(item["QUESTION"], str) or not item["QUESTION"].strip():
            raise ExtractError(file, "a non-empty question string", place=place, column="QUESTION")
        label = canonical_label(spec, str(item["final_decision"]), file, place, "final_decision")
        instances.append(
            Instance(
                benchmark=spec.id,
                id=str(pmid),
                fields={"context": "\n".join(contexts), "question": item["QUESTION"].strip(),
                        "labelled_context": labelled_context(item.get("LABELS"), contexts)},
                references=[label],
                label=label,
            )
        )
    return LoadResult(instances=instances, files=[file])
