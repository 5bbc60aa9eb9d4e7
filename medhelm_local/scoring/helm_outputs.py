"""Model outputs as HELM (crfm-helm) writes them, read as predictions for ``score``.

A HELM run directory holds ``scenario_state.json`` (the adapter spec and every request state: the instance, the
request, the result with its completions), ``per_instance_stats.json`` (HELM's metric values per instance, no
outputs), and after ``helm-summarize`` ``display_predictions.json`` (per instance: ``predicted_text``, and
``mapped_output`` where an output mapping turned a letter into an answer) and ``instances.json``. The outputs
are read from ``scenario_state.json`` when present, else from ``display_predictions.json``; ``per_instance_stats``
alone names no output and is refused with that reason.

HELM gives instances positional ids ("id0", "id1", ...) unless its scenario set them (MedCalc-Bench: the row
number). A HELM instance is matched to a registered one by id when every HELM id is a registered id; otherwise by
content: the registered instance whose text fields appear, line by line, in the HELM instance's input, the
references breaking ties. Only unperturbed instances of the first train trial count. Each prediction keeps the
model's own completion (``output``: "B", MedHallu's "1") and, where HELM's output mapping maps it, the mapped
answer (``mapped``: "no" for PubMedQA, the option text for MedQA); ``score`` reads the completion in MedHELM's
prompt style (which maps HELM's answers to the spec's labels), and in the default style the mapped answer where it
is one of the spec's labels. A failed request
is a failed prediction (excluded and counted), never a 0.

Errors name the file and the place (``request_states[12]``, a HELM instance id), never instance or output text.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm_local.errors import BadInputError
from medhelm_local.records import Instance

SCENARIO_STATE = "scenario_state.json"
DISPLAY_PREDICTIONS = "display_predictions.json"
INSTANCES = "instances.json"
PER_INSTANCE_STATS = "per_instance_stats.json"
HELM_FILES = (SCENARIO_STATE, DISPLAY_PREDICTIONS, INSTANCES, PER_INSTANCE_STATS)
CORRECT_TAG = "correct"
FAILED = "helm_request_failed"


class HelmOutputsError(BadInputError):
    """A HELM output file is unusable; names the file and the place, never the content."""

    def __init__(self, path: Path, expected: str, *, where: str | None = None) -> None:
        super().__init__(f"file {path}{f', {where}' if where else ''}: expected {expected}")


@dataclass(frozen=True)
class HelmInstance:
    helm_id: str
    input_text: str
    correct: tuple[str, ...]  # texts of the references tagged "correct"


@dataclass(frozen=True)
class HelmPrediction:
    position: int  # 1-based place in the file (request state or display prediction), for error messages
    instance: HelmInstance
    output: str | None  # the completion as the model wrote it; None: the request failed
    mapped: str | None = None  # HELM's output mapping applied to it ("B" -> "no"), where one maps it

    def answer(self, labels: Sequence[str] | None) -> str | None:
        """The completion; given ``labels`` (the answers the scoring prompt asks for), HELM's mapped answer where it
        is one of them (PubMedQA's "no"; MedQA's option text is not, so its letter is read)."""
        return self.mapped if labels is not None and self.mapped in labels else self.output


def is_helm_source(path: Path) -> bool:
    """A HELM run directory or one of its JSON files (rather than the project's JSONL predictions)."""
    if path.is_dir():
        return any((path / name).is_file() for name in HELM_FILES)
    return path.name in HELM_FILES


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"))
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError):
        raise HelmOutputsError(path, "a JSON document written by HELM") from None


def _instance(path: Path, raw: Any, where: str) -> HelmInstance:
    if not isinstance(raw, dict) or not isinstance(raw.get("input"), dict):
        raise HelmOutputsError(path, 'an instance object with "input": {"text": ...}', where=where)
    text = raw["input"].get("text", "")
    helm_id = raw.get("id")
    if not isinstance(text, str) or helm_id is None or isinstance(helm_id, bool | dict | list):
        raise HelmOutputsError(path, 'an instance with a string "input.text" and an "id"', where=where)
    correct = []
    for reference in raw.get("references") or []:
        if isinstance(reference, dict) and CORRECT_TAG in (reference.get("tags") or []):
            output = reference.get("output")
            if isinstance(output, dict) and isinstance(output.get("text"), str):
                correct.append(output["text"])
    return HelmInstance(helm_id=str(helm_id), input_text=text, correct=tuple(correct))


def _first_trial(raw: dict[str, Any]) -> bool:
    return not raw.get("perturbation") and int(raw.get("train_trial_index") or 0) == 0


def _from_scenario_state(path: Path) -> list[HelmPrediction]:
    data = _load(path)
    states = data.get("request_states") if isinstance(data, dict) else None
    if not isinstance(states, list):
        raise HelmOutputsError(path, 'a HELM ScenarioState: an object with a "request_states" list')
    predictions: list[HelmPrediction] = []
    seen: set[str] = set()
    for index, state in enumerate(states):
        where = f"request_states[{index}]"
        if not isinstance(state, dict):
            raise HelmOutputsError(path, "a request state object", where=where)
        instance = _instance(path, state.get("instance"), where + ".instance")
        raw_instance = state["instance"]
        if not _first_trial({**raw_instance, "train_trial_index": state.get("train_trial_index")}):
            continue
        if state.get("reference_index") is not None or state.get("request_mode") == "calibration":
            continue  # multiple-choice-separate requests: one per answer choice, not a generated answer
        if instance.helm_id in seen:
            continue
        seen.add(instance.helm_id)
        result = state.get("result")
        output: str | None = None
        if isinstance(result, dict) and result.get("success") and result.get("completions"):
            first = result["completions"][0]
            if not isinstance(first, dict) or not isinstance(first.get("text"), str):
                raise HelmOutputsError(path, 'a completion with a string "text"', where=where + ".result")
            output = first["text"]
            mapping = state.get("output_mapping")
            mapped = mapping.get(output.strip()) if isinstance(mapping, dict) else None
        else:
            mapped = None
        predictions.append(HelmPrediction(index + 1, instance, output, mapped if isinstance(mapped, str) else None))
    return predictions


def _from_display_predictions(path: Path, instances_path: Path | None) -> list[HelmPrediction]:
    data = _load(path)
    if not isinstance(data, list):
        raise HelmOutputsError(path, "a HELM display_predictions list")
    by_id: dict[str, HelmInstance] = {}
    if instances_path is not None:
        raw_instances = _load(instances_path)
        if not isinstance(raw_instances, list):
            raise HelmOutputsError(instances_path, "a HELM instances list")
        for index, raw in enumerate(raw_instances):
            found = _instance(instances_path, raw, f"item {index}")
            by_id[found.helm_id] = found
    predictions: list[HelmPrediction] = []
    seen: set[str] = set()
    for index, raw in enumerate(data):
        where = f"item {index}"
        if not isinstance(raw, dict) or raw.get("instance_id") is None:
            raise HelmOutputsError(path, 'a display prediction with an "instance_id"', where=where)
        if not _first_trial(raw) or raw.get("reference_index") is not None:
            continue
        helm_id = str(raw["instance_id"])
        if helm_id in seen:
            continue
        seen.add(helm_id)
        text = raw.get("predicted_text")
        if not isinstance(text, str):
            raise HelmOutputsError(path, 'a string "predicted_text"', where=where)
        mapped = raw.get("mapped_output") if isinstance(raw.get("mapped_output"), str) else None
        instance = by_id.get(helm_id, HelmInstance(helm_id=helm_id, input_text="", correct=()))
        predictions.append(HelmPrediction(index + 1, instance, text, mapped))
    return predictions


def read_helm_outputs(path: Path) -> tuple[list[HelmPrediction], Path]:
    """The predictions of a HELM run directory or file, and the file they were read from."""
    folder = path if path.is_dir() else path.parent
    if (folder / SCENARIO_STATE).is_file() and (path.is_dir() or path.name != DISPLAY_PREDICTIONS):
        source = folder / SCENARIO_STATE
        return _from_scenario_state(source), source
    if (folder / DISPLAY_PREDICTIONS).is_file() and (path.is_dir() or path.name != INSTANCES):
        instances = folder / INSTANCES
        source = folder / DISPLAY_PREDICTIONS
        return _from_display_predictions(source, instances if instances.is_file() else None), source
    raise HelmOutputsError(path, f"a HELM run directory with {SCENARIO_STATE} or {DISPLAY_PREDICTIONS} "
                                 f"(HELM's {PER_INSTANCE_STATS} holds its metric values, not the model outputs)")


# -- matching HELM instances to the registered dataset ----------------------------------------------------------


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass
class _Signature:
    instance_id: str
    fields: list[list[str]]  # per text field, its normalised non-empty lines
    references: frozenset[str]


def _signature(instance: Instance) -> _Signature:
    fields = []
    for value in instance.fields.values():
        if isinstance(value, str) and value.strip():
            fields.append([_norm(line) for line in value.splitlines() if line.strip()])
    references = {_norm(r) for r in instance.references if r.strip()}
    if instance.label is not None:
        references.add(_norm(instance.label))
    return _Signature(instance.id, fields, frozenset(references))


def match_instances(path: Path, predictions: list[HelmPrediction], instances: Iterable[Instance], *,
                    labels: Sequence[str] | None = None) -> list[tuple[int, str, str | None]]:
    """``[(position, registered instance id, output)]`` for HELM predictions (the output: see
    :meth:`HelmPrediction.answer`); raises naming the HELM ids that match no registered instance, or more than
    one."""
    signatures = [_signature(i) for i in instances]
    ids = {s.instance_id for s in signatures}
    if predictions and all(p.instance.helm_id in ids for p in predictions):
        return [(p.position, p.instance.helm_id, p.answer(labels)) for p in predictions]
    by_reference: dict[str, list[_Signature]] = defaultdict(list)
    for signature in signatures:
        for reference in signature.references:
            by_reference[reference].append(signature)
    matched: list[tuple[int, str, str | None]] = []
    unmatched: list[str] = []
    ambiguous: list[str] = []
    taken: dict[str, str] = {}
    for prediction in predictions:
        helm = prediction.instance
        text = _norm(helm.input_text)
        correct = {_norm(c) for c in helm.correct}
        candidates = [s for c in correct for s in by_reference.get(c, [])] or signatures
        best: list[_Signature] = []
        best_key = (0, 0)
        for signature in {id(s): s for s in candidates}.values():
            contained = sum(all(line in text for line in field) for field in signature.fields)
            if not contained:
                continue
            key = (contained, len(correct & signature.references))
            if key > best_key:
                best, best_key = [signature], key
            elif key == best_key:
                best.append(signature)
        if not text or not best:
            unmatched.append(helm.helm_id)
        elif len(best) > 1 or best[0].instance_id in taken:
            ambiguous.append(helm.helm_id)
        else:
            taken[best[0].instance_id] = helm.helm_id
            matched.append((prediction.position, best[0].instance_id, prediction.answer(labels)))
    if unmatched or ambiguous:
        def some(items: list[str]) -> str:
            return ", ".join(items[:10]) + (" ..." if len(items) > 10 else "")

        problems = []
        if unmatched:
            problems.append(f"{len(unmatched)} HELM instance(s) match no registered instance (ids {some(unmatched)})")
        if ambiguous:
            problems.append(f"{len(ambiguous)} HELM instance(s) match more than one registered instance or one "
                            f"already matched (ids {some(ambiguous)})")
        raise HelmOutputsError(path, "HELM instances of the registered dataset, matched by id or by their input "
                                     "text; " + "; ".join(problems))
    return matched

