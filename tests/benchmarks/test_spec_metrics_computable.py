"""Every metric a shipped spec lists can be computed from what its loader gives its instances.

`note_extract` listed `rouge_l` beside its jury, but its loader (MedHELM's NoteExtract has no gold response) gives
no references: ROUGE-L was never reported for it, and nothing said so, because `rouge_l` did not declare that it
reads references. Checked two ways: each metric's declared needs against the fields the loader gives (its options
for a table loader, its declaration for a native-format one), for every shipped spec; and each per-instance
metric computed on instances the real loader gives, from the real public files, the package's samples, or, for a
hospital extract (`private_table`), a file with the columns the spec maps."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_specs
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.demo.medicationqa import write_sample_xlsx
from medhelm_local.loaders import load_dataset
from medhelm_local.loaders.records import parse_mapping
from medhelm_local.loaders.tabular import split_options
from medhelm_local.records import LABEL, REFERENCES, Instance
from medhelm_local.scoring.checks import TABLE_LOADERS, check_spec, provided_fields
from medhelm_local.scoring.registry import spec_scorers
from medhelm_local.scoring.scorer import InstanceScorer, MetricInputError, Unscorable

SPECS = {s.id: s for s in shipped_specs()}
PUBLIC = {"pubmedqa": "pubmedqa", "medcalc_bench": "medcalc_bench", "aci_bench": "aci_bench", "medec": "medec",
          "ehrsql": "ehrsql", "medqa": "medqa", "medhallu": "medhallu",
          "mtsamples": "mtsamples_sample/mtsamples_processed",
          "mtsamples_procedures": "mtsamples_sample/mtsample_procedure"}
PACKAGED = {"medication_qa": write_sample_xlsx}
HOSPITAL = sorted(s.id for s in SPECS.values() if s.input_format == "private_table")
LOADED = sorted({*PUBLIC, *PACKAGED, *HOSPITAL})


@pytest.mark.parametrize("benchmark", sorted(SPECS))
def test_every_listed_metric_needs_only_what_the_loader_gives(benchmark: str) -> None:
    spec = SPECS[benchmark]
    given = provided_fields(spec)
    assert given is not None, f"loader {spec.input_format} declares no fields (register_loader(..., gives=...))"
    for scorer, roles in spec_scorers(spec):
        for alternatives in scorer.needs(spec).fields:
            assert given.intersection(alternatives), (
                f"{benchmark}: metric {', '.join(roles)} reads {' or '.join(alternatives)}; its loader gives "
                f"{sorted(given)}")
    check_spec(spec)  # what refuses such a spec before a run


def _hospital_extract(spec: BenchmarkSpec, folder: Path) -> Path:
    """A hospital extract with exactly the columns the spec maps (a valid label in its label column)."""
    mapping = parse_mapping(spec, split_options(spec)[1])
    columns = mapping.required_columns()
    path = folder / f"{spec.id}.csv"
    folder.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in range(3):
            writer.writerow([spec.labels[row % len(spec.labels)] if c == mapping.label_column and spec.labels
                             else f"Synthetic {c} {row}: stable, routine follow up." for c in columns])
    return path


def _instances(spec: BenchmarkSpec, public_data: Path, tmp_path: Path) -> list[Instance]:
    if spec.id in PUBLIC:
        path = public_data / PUBLIC[spec.id]
    elif spec.id in PACKAGED:
        path = PACKAGED[spec.id](tmp_path / f"{spec.id}.xlsx")
    else:
        path = _hospital_extract(spec, tmp_path / "extracts")
    return load_dataset(spec, path).instances[:40]


def _carries(instance: Instance, field: str) -> bool:
    if field == LABEL:
        return instance.label is not None
    if field == REFERENCES:
        return any(r.strip() for r in instance.references)
    return field.removeprefix("meta.") in instance.meta


@pytest.mark.parametrize("benchmark", LOADED)
def test_every_listed_metric_computes_on_what_the_loader_gives(benchmark: str, public_data: Path,
                                                               tmp_path: Path) -> None:
    spec = SPECS[benchmark]
    instances = _instances(spec, public_data, tmp_path)
    assert instances
    if spec.input_format not in TABLE_LOADERS:  # a native loader's declaration holds on its real files
        declared = provided_fields(spec) or set()
        missing = {f for f in declared for i in instances if not _carries(i, f)}
        assert not missing, f"{spec.input_format} declares {sorted(missing)} that some instances lack"
    for scorer, roles in spec_scorers(spec):
        if not isinstance(scorer, InstanceScorer):
            continue  # the jury asks judges: what it reads of an instance is checked above
        values = []
        for instance in instances:
            answer = next((r for r in instance.references if r.strip()), instance.label or "Synthetic answer.")
            try:
                values.append(scorer.fn(spec, instance, answer)[0])
            except (Unscorable, MetricInputError):
                values.append(None)
        assert any(v is not None for v in values), (
            f"{benchmark}: metric {', '.join(roles)} computes nothing from the instances its loader gives")
