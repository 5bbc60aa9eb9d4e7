"""``score``: score predictions produced elsewhere inside the network against a registered dataset."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import typer

from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.deployment import as_job, refuse_without_model_egress
from medhelm_local.errors import BadInputError, NotFoundError
from medhelm_local.prompts.styles import DEFAULT_STYLE, MEDHELM_STYLE, check_style, parity_status, styled_spec
from medhelm_local.records import Instance
from medhelm_local.runner.plan import check_style_fields
from medhelm_local.scoring.checks import check_spec
from medhelm_local.scoring.engine import score_items
from medhelm_local.scoring.helm_outputs import FAILED as HELM_FAILED
from medhelm_local.scoring.helm_outputs import is_helm_source, match_instances, read_helm_outputs
from medhelm_local.scoring.registry import calls_models, networked_judges
from medhelm_local.scoring.summary import Breakdown, summarise
from medhelm_local.store.judgments import judge_failure_rates

EXPECTED_LINE = 'a JSON object {"id": "<instance id>", "output": "<model output>"} ("output" may be null)'


def register(app: typer.Typer) -> None:
    app.command("score")(score)


class PredictionsError(BadInputError):
    """A predictions file is invalid; names the file and line, never the content."""

    def __init__(self, path: Path, expected: str, *, line: int | None = None, key: str | None = None) -> None:
        where = [f"file {path}"]
        if line is not None:
            where.append(f"line {line}")
        if key is not None:
            where.append(f"key {key!r}")
        super().__init__(f"{', '.join(where)}: expected {expected}")


def read_predictions(path: Path) -> tuple[list[tuple[int, str, str | None]], str]:
    """``[(line number, id, output)]`` and the file's sha256. Raises :class:`PredictionsError` naming the line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except OSError:
        raise BadInputError(f"{path}: cannot be read") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        raise PredictionsError(path, "UTF-8 text", line=bad_line) from None
    predictions: list[tuple[int, str, str | None]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise PredictionsError(path, f"{EXPECTED_LINE} (line {number} is not JSON)", line=number) from None
        if not isinstance(record, dict):
            raise PredictionsError(path, EXPECTED_LINE, line=number)
        raw_id = record.get("id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or not str(raw_id).strip():
            raise PredictionsError(path, 'a non-empty string or integer "id"', line=number, key="id")
        if "output" not in record:
            raise PredictionsError(path, 'an "output" key (a string, or null for a failed prediction)', line=number,
                               key="output")
        output = record["output"]
        if output is not None and not isinstance(output, str):
            raise PredictionsError(path, 'a string (or null) "output"', line=number, key="output")
        instance_id = str(raw_id).strip()
        if instance_id in seen:
            raise PredictionsError(path, f"one prediction per id (this id is also on line {seen[instance_id]})",
                               line=number, key="id")
        seen[instance_id] = number
        predictions.append((number, instance_id, output))
    if not predictions:
        raise PredictionsError(path, "at least one prediction line")
    return predictions, hashlib.sha256(data).hexdigest()


def _match(path: Path, benchmark: str, predictions: list[tuple[int, str, str | None]],
           instances: dict[str, Instance]) -> list[tuple[Instance, str | None, str | None]]:
    unknown = [(number, iid) for number, iid, _ in predictions if iid not in instances]
    if unknown:
        lines = ", ".join(str(number) for number, _ in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        raise PredictionsError(
            path, f"ids of the registered dataset of {benchmark} ({len(unknown)} prediction(s) have an id that "
            f"is not in it, on line(s) {lines})", key="id")
    return [(instances[iid], output, None if output is not None else "no_output") for _, iid, output in predictions]


def score_payload(breakdown: Breakdown, *, fingerprint: str, dataset_size: int, predicted: int, file_sha256: str,
                  judges: list[dict[str, Any]] | None = None, source_format: str = "jsonl",
                  prompt_style: str = DEFAULT_STYLE) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "benchmark": breakdown.benchmark, "metric": breakdown.metric, "prompt_style": prompt_style,
        "score": breakdown.score, "n": breakdown.n,
        "n_failed": breakdown.n_failed, "n_predictions": predicted,
        "dataset_fingerprint": fingerprint, "dataset_instances": dataset_size,
        "predictions_sha256": file_sha256, "predictions_format": source_format,
        "n_gold_empty": breakdown.n_gold_empty, "score_nonempty_gold": breakdown.score_nonempty_gold,
        "breakdown": {
            "parse_rate": breakdown.parse_rate, "strict_format_rate": breakdown.strict_format_rate,
            "failures": breakdown.failures, "secondary": breakdown.secondary, "groups": breakdown.groups,
        },
    }
    if judges is not None:
        payload["breakdown"]["judges"] = judges
    return payload


def score(
    ctx: typer.Context,
    benchmark: str = typer.Argument(..., help="Benchmark id."),
    predictions: Path = typer.Option(
        ..., "--predictions",
        help="JSONL of {\"id\": ..., \"output\": ...}, or model outputs as HELM writes them: a HELM run directory, "
             "its scenario_state.json or display_predictions.json."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    jury_concurrency: int | None = typer.Option(None, "--jury-concurrency", min=1, max=64,
                                                help="Judge requests in flight per judge (jury benchmarks)."),
    prompt_style: str | None = typer.Option(
        None, "--prompt-style",
        help="The prompts the outputs answer: default (this appliance's) or medhelm (MedHELM's: answer letters, "
             "MedHallu's 1/0, HELM's jury prompt). Default: medhelm for HELM outputs where the benchmark has "
             "MedHELM parity, else default."),
) -> None:
    """Score a predictions file against the registered dataset (the benchmark's current dataset version)."""
    app_ctx = app_context(ctx)
    written = app_ctx.specs.get(benchmark)
    helm = is_helm_source(predictions)
    if prompt_style is None:  # HELM's outputs answer HELM's prompts
        prompt_style = MEDHELM_STYLE if helm and parity_status(written) == "identical" else DEFAULT_STYLE
    spec = styled_spec(written, check_style(prompt_style))  # exit 2 where parity is impossible
    if helm:
        helm_predictions, source = read_helm_outputs(predictions)
        file_sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
        source_format = f"helm:{source.name}"
    else:
        lines, file_sha256 = read_predictions(predictions)
        source, source_format = predictions, "jsonl"
    asks_models = calls_models(spec)  # the jury: judges from appliance.yaml, their failure rates reported
    config = app_ctx.home.config if asks_models else None
    networked = networked_judges(config, [spec]) if config is not None else []
    if networked:
        refuse_without_model_egress(
            f"score asks the judges ({', '.join(networked)}) to score {benchmark}",
            as_job("score", benchmark, "--predictions", str(predictions), "--prompt-style", prompt_style, "--json")
            + "; --predictions must name the file on a volume the Job mounts too (the toolbox's /tmp and incoming "
            "folder are its own)")
    with app_ctx.open_store() as store:
        dataset = store.current_dataset(benchmark)
        if dataset is None:
            raise NotFoundError(f"no dataset is registered for {benchmark}; see `datasets register`")
        if prompt_style != DEFAULT_STYLE:
            check_style_fields(store, spec, dataset.fingerprint)
        check_spec(spec, config, judges=True)  # judges, rubric, the fields the metrics read: before a judge is asked
        if helm:
            registered = [i for chunk in store.iter_instances(benchmark, dataset.fingerprint, chunk=2000)
                          for i in chunk]
            # MedHELM's style reads the model's own answer ("B", "1"); the default style HELM's mapped answer where it
            # is one of the spec's labels (PubMedQA's "yes")
            labels = (spec.labels or []) if prompt_style == DEFAULT_STYLE else None
            lines = match_instances(source, helm_predictions, registered, labels=labels)
            instances = {i.id: i for i in registered}
        else:
            instances = store.get_instances(benchmark, dataset.fingerprint, [iid for _, iid, _ in lines])
        items = _match(source, benchmark, lines, instances)
        if helm:  # HELM's failed requests: excluded and counted under their own name
            items = [(i, o, None if o is not None else HELM_FAILED) for i, o, _ in items]
        scope = f"predictions:{file_sha256}" + ("" if prompt_style == DEFAULT_STYLE else f":{prompt_style}")
        scores = score_items(store, spec, items, scope=scope, config=config, jury_concurrency=jury_concurrency,
                             egress=app_ctx.egress)
        judges = None
        if asks_models:
            judges = [{"judge": r.judge, "total": r.total, "ok": r.ok, "request_failed": r.request_failed,
                       "invalid_reply": r.invalid_reply, "failure_rate": r.failure_rate}
                      for r in judge_failure_rates(store, scope, benchmark)]
    breakdown = summarise(benchmark, spec.metric, scores)
    audit_event(app_ctx.home, app_ctx.actor, "score.predictions", role="informatics", benchmark=benchmark,
                predictions_sha256=file_sha256, predictions_format=source_format, prompt_style=prompt_style,
                dataset=dataset.fingerprint,
                scored=breakdown.n, failed=breakdown.n_failed)
    payload = score_payload(breakdown, fingerprint=dataset.fingerprint, dataset_size=dataset.n_instances,
                            predicted=len(items),
                            file_sha256=file_sha256, judges=judges, source_format=source_format,
                            prompt_style=prompt_style)
    if as_json:
        emit_json(payload)
        return
    columns = ["score", "n", "failed", "parse rate", "strict format rate"]
    values: list[Any] = [breakdown.score, breakdown.n, breakdown.n_failed, breakdown.parse_rate,
                         breakdown.strict_format_rate]
    if breakdown.n_gold_empty is not None:
        columns += ["empty gold", "score on non-empty gold"]
        values += [breakdown.n_gold_empty, breakdown.score_nonempty_gold]
    emit_table(f"{benchmark} — {spec.metric} (prompt style: {prompt_style})", columns, [values])
    if breakdown.secondary:
        emit_table("secondary metrics", ["metric", "score", "n"],
                   [[name, v["score"], v["n"]] for name, v in breakdown.secondary.items()])
    if breakdown.groups:
        emit_table("by group", ["group", "score", "n"], [[name, v["score"], v["n"]] for name, v in
                                                        breakdown.groups.items()])
    if judges:
        emit_table("judges", ["judge", "total", "ok", "request failed", "invalid reply", "failure rate"],
                   [[j["judge"], j["total"], j["ok"], j["request_failed"], j["invalid_reply"], j["failure_rate"]]
                    for j in judges])
    if breakdown.n_failed:
        info(f"{breakdown.n_failed} instance(s) could not be scored and are excluded: {breakdown.failures}")
    if len(items) < dataset.n_instances:
        info(f"{len(items)} of the dataset's {dataset.n_instances} instances have a prediction in {source.name}; the "
             f"other {dataset.n_instances - len(items)} are not scored, so this is a score on part of {benchmark}")
