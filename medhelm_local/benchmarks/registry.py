"""Benchmark specs: the ones shipped in ``specs/`` and a home's own ("bring your own extract") specs.

A custom benchmark is one YAML file in the :class:`~medhelm_local.benchmarks.spec.BenchmarkSpec` schema
(``access``, ``curation`` and ``input_format`` default to ``private``, ``new`` and ``private_table``).
:func:`register_custom_spec` validates it (schema, taxonomy placement, loader, metric, prompt template) and
stores it as ``<home>/benchmarks/<id>.yaml``, so it persists across invocations. A home's
:class:`SpecRegistry` (``AppContext.specs``) sees the shipped specs and that home's custom ones;
:func:`shipped_spec` and :func:`shipped_specs` see the shipped ones only.
"""

from __future__ import annotations

import re
import string
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, MedhelmError, NotFoundError, unknown_field_hint, validation_problems
from medhelm_local.home.layout import atomic_write
from medhelm_local.phi_text import NAME_REASONS, chosen_name_problem

CUSTOM_DIR = "benchmarks"
# A custom spec file is read only up to this size: specs are a page of YAML, never data.
MAX_SPEC_BYTES = 256 * 1024
MAX_SPEC_DEPTH = 64
CUSTOM_DEFAULTS = {"access": "private", "curation": "new", "input_format": "private_table"}


# libyaml's safe loader where PyYAML was built with it (the same safe constructors; the 39 shipped specs parse in
# about a tenth of the pure-Python loader's time, which every `run` pays before planning).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SpecError(RuntimeError):
    """A shipped spec is invalid: a packaging bug, not user input."""


def parse_spec(text: str, source: str) -> BenchmarkSpec:
    try:
        return BenchmarkSpec.model_validate(yaml.load(text, Loader=_SAFE_LOADER))
    except (yaml.YAMLError, ValidationError) as exc:
        raise SpecError(f"benchmark spec {source} is invalid: {exc}") from exc


@cache
def _builtin_ids() -> tuple[str, ...]:
    """The ids of the shipped specs (their file names), sorted: listed without parsing any."""
    folder = resources.files("medhelm_local.benchmarks") / "specs"
    return tuple(sorted(entry.name.removesuffix(".yaml") for entry in folder.iterdir()
                        if entry.name.endswith(".yaml")))


@cache
def _builtin_spec(benchmark_id: str) -> BenchmarkSpec:
    """One shipped spec (``benchmark_id`` from :func:`_builtin_ids`), parsed when first asked for: a command that
    uses three benchmarks parses three files, not all 39 (about 11 ms on this project's machine)."""
    name = f"{benchmark_id}.yaml"
    entry = resources.files("medhelm_local.benchmarks") / "specs" / name
    spec = parse_spec(entry.read_text(encoding="utf-8"), name)
    if spec.id != benchmark_id:
        raise SpecError(f"benchmark spec file {name} holds id {spec.id!r}")
    return spec


def _builtin_specs() -> dict[str, BenchmarkSpec]:
    return {benchmark_id: _builtin_spec(benchmark_id) for benchmark_id in _builtin_ids()}


def custom_dir(home: Path) -> Path:
    return home / CUSTOM_DIR


def custom_specs(home: Path | None) -> dict[str, BenchmarkSpec]:
    """The custom specs stored under ``<home>/benchmarks`` (none when ``home`` is None or has none)."""
    if home is None:
        return {}
    folder = custom_dir(home)
    if not folder.is_dir():
        return {}
    specs: dict[str, BenchmarkSpec] = {}
    for file in sorted(folder.glob("*.yaml")):
        spec = load_custom_spec(file, check_clash=False)
        if file.name != f"{spec.id}.yaml":
            raise BadInputError(f"{file}: holds benchmark id {spec.id!r}; the file must be named {spec.id}.yaml")
        specs[spec.id] = spec
    return specs


class SpecRegistry:
    """The benchmark specs one appliance home sees: the shipped ones, then the home's own ("bring your own
    extract") specs under ``<home>/benchmarks``. A front end gets its registry from its context
    (``AppContext.specs``) and hands it down; nothing in the process remembers a home."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home

    def get(self, benchmark_id: str) -> BenchmarkSpec:
        """A shipped spec, else one of the home's custom specs."""
        spec = _builtin_spec(benchmark_id) if benchmark_id in _builtin_ids() else None
        if spec is None and self.home is not None:
            file = custom_dir(self.home) / f"{benchmark_id}.yaml"
            if file.is_file():
                spec = load_custom_spec(file, check_clash=False)
        if spec is None:
            raise NotFoundError(f"unknown benchmark {benchmark_id!r}; see `medhelm-local benchmarks list`")
        return spec

    def all(self) -> list[BenchmarkSpec]:
        """The shipped specs, then the home's custom specs."""
        return [*_builtin_specs().values(), *custom_specs(self.home).values()]

    def category_of(self, benchmark_id: str) -> str:
        """The benchmark's taxonomy category ("Uncategorised" for a benchmark no longer defined)."""
        try:
            return self.get(benchmark_id).category
        except NotFoundError:
            return "Uncategorised"

    def register(self, path: Path) -> BenchmarkSpec:
        """Validate the spec file ``path`` and store it in the home (see :func:`register_custom_spec`)."""
        if self.home is None:
            raise NotFoundError("no appliance home to register a benchmark in")
        return register_custom_spec(path, self.home)


SHIPPED = SpecRegistry()


def shipped_spec(benchmark_id: str) -> BenchmarkSpec:
    """A spec shipped in this package (a home's custom specs come from its :class:`SpecRegistry`)."""
    return SHIPPED.get(benchmark_id)


def shipped_specs() -> list[BenchmarkSpec]:
    """The specs shipped in this package, without any home's custom specs."""
    return list(_builtin_specs().values())


def is_custom(benchmark_id: str) -> bool:
    """Not one of the shipped specs."""
    return benchmark_id not in _builtin_ids()


class _YamlRefused(yaml.YAMLError):
    def __init__(self, reason: str, mark: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.problem_mark = mark


class _SpecLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases (``*name``: a spec never needs one, and a nest of them, an "alias
    bomb" in ``meta_constants``, expands to gigabytes) and nesting deeper than MAX_SPEC_DEPTH (a RecursionError)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _YamlRefused("YAML aliases (*name) are refused in a benchmark file; write the value out",
                               self.peek_event().start_mark)
        if self.depth >= MAX_SPEC_DEPTH:
            raise _YamlRefused(f"the benchmark file nests deeper than {MAX_SPEC_DEPTH} levels",
                               self.peek_event().start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read the benchmark file ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise BadInputError(f"{path}: the benchmark file is larger than {MAX_SPEC_BYTES // 1024} KiB, the cap for a "
                            "spec (the data belongs in the extract, not in the spec)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: expected a UTF-8 YAML benchmark file") from None
    try:
        data = yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass
    except _YamlRefused as exc:
        mark = exc.problem_mark
        raise BadInputError(f"{path}: {exc.reason} (line {mark.line + 1}, column {mark.column + 1})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise BadInputError(f"{path}: invalid YAML{where}{_yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path}: expected a YAML mapping with the benchmark's fields")
    return data


_QUOTED = re.compile(r"'[^']*'")  # a quoted span of a YAML error, left to right
_TOKEN_NAME = re.compile(r"'<[a-z ]+>'")  # the parser's token names ('<block mapping start>')


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the YAML scanner or parser expected (``expected ',' or '}', but got '?'``; ``found character '\\t'
    that cannot start any token``): its own fixed wording around at most a character or a token name; any longer
    quoted text is left out, in case the file given as a spec is an extract."""
    problem = getattr(exc, "problem", None)
    if not isinstance(exc, (yaml.scanner.ScannerError, yaml.parser.ParserError)) or not isinstance(problem, str):
        return ""
    return ": " + _QUOTED.sub(
        lambda m: m.group() if len(m.group()) <= 6 or _TOKEN_NAME.fullmatch(m.group()) else "'...'", problem)


def load_custom_spec(path: Path, *, check_clash: bool = True, check_fields: bool | None = None) -> BenchmarkSpec:
    """Read and validate a user's benchmark YAML; every problem is a :class:`BadInputError` naming the field.

    Its metrics are checked against the scorer registry (``metrics:``, or the older single ``metric:``); with
    ``check_fields`` (default: when registering, ``check_clash``) also that each metric suits the task and the
    instance fields its scorers need against its loader options (``scoring/checks.py``). A stored spec is checked
    so again when a run is planned: one stored by an earlier version is still listed, and its results read."""
    from medhelm_local.loaders.base import available_loaders
    from medhelm_local.scoring.checks import check_spec
    from medhelm_local.scoring.registry import MetricNotAvailable, known_metrics
    from medhelm_local.taxonomy import load_taxonomy

    data = {**CUSTOM_DEFAULTS, **_read_yaml(path)}
    metric_field = "metric" if "metric" in data else "metrics"  # the older single field, or the list
    taxonomy = load_taxonomy()
    subcategory = data.get("subcategory")
    placement = taxonomy.placement(subcategory) if isinstance(subcategory, str) else None
    if placement is None:
        names = "; ".join(s.name for s in taxonomy.subcategories)
        raise BadInputError(f"{path}: field subcategory must be one of the taxonomy's subcategories ({names})")
    category, sub = placement
    given = data.get("category")
    if given is not None and (not isinstance(given, str) or given.casefold() != category.name.casefold()):
        raise BadInputError(
            f"{path}: field category must be {category.name!r}, the category of subcategory {sub.name!r}"
        )
    data["category"], data["subcategory"] = category.name, sub.name
    try:
        spec = BenchmarkSpec.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(f"{path}: invalid benchmark spec ({validation_problems(exc)}){_quote_hint(exc)}"
                            f"{_loader_option_hint(exc)}") from None
    if check_clash and spec.id in _builtin_ids():
        raise BadInputError(f"{path}: field id {spec.id!r} is a built-in MedHELM benchmark; choose another id")
    _check_id_is_no_phi(path, spec.id)
    if spec.input_format not in available_loaders():
        raise BadInputError(f"{path}: field input_format must be one of {', '.join(available_loaders())}")
    try:
        check = check_clash if check_fields is None else check_fields
        check_spec(spec, fields=check, task=check, metric_field=metric_field)
    except MetricNotAvailable:
        unknown = [name for name in spec.metric_names if name not in known_metrics()]
        raise BadInputError(f"{path}: field {metric_field} must be one of {', '.join(known_metrics())} (not "
                            f"{', '.join(repr(n) for n in unknown)})") from None
    except MedhelmError as exc:
        raise BadInputError(f"{path}: {exc}") from None
    templates = [("prompt.template", spec.prompt.template), ("prompt.system", spec.prompt.system or ""),
                 ("judge_question", spec.judge_question or ""), ("judge_gold", spec.judge_gold or "")]
    if spec.judge is not None:
        templates.append(("judge.template", spec.judge.template))
    if spec.medhelm is not None:
        templates += [(f"medhelm.{key}", getattr(spec.medhelm, key) or "")
                      for key in ("template", "judge_question", "judge_gold", "judge_template")]
    for name, template in templates:
        _check_template(path, name, template)
    return spec


def _check_id_is_no_phi(path: Path, benchmark_id: str) -> None:
    """A custom benchmark's id is recorded as written in the audit trail (``dataset.register``, ``run.start``),
    ``audit report`` and its PDF, and exports: it may not hold a date, a record number's or another PHI pattern's
    shape, or encoded text, as an actor may not. Read for stored specs too: a file written into the home's
    ``benchmarks/`` by hand is recorded as well. The refusal never quotes the id."""
    problem = chosen_name_problem(benchmark_id)
    if problem is not None:
        raise BadInputError(f"{path}: field id: {NAME_REASONS[problem]}; a benchmark id is recorded in the audit "
                            "trail and exports, so it names the task in words (e.g. followup_needed), never a "
                            "patient's date, record number or encoded text")


def _quote_hint(exc: ValidationError) -> str:
    """Where YAML read a value as a boolean or a number where text was expected (an unquoted ``yes``, ``No``,
    ``on`` or ``1`` as a label or a label_map key: pydantic then names the key as 1 or 0), what to do."""
    if any(e["type"] == "string_type" and isinstance(e.get("input"), (bool, int, float)) for e in exc.errors()):
        return ("; YAML reads an unquoted yes/no, Yes/No, on/off or true/false as a boolean and an unquoted number "
                'as a number: quote labels and label_map keys and values, e.g. label_map: {"Yes": "yes", "1": "A"}')
    return ""


def _loader_option_hint(exc: ValidationError) -> str:
    """A loader option (``label_column``, ``fields``, ``format``...) written at the spec's top level: where it goes;
    another unknown field: the spec field it most resembles."""
    from medhelm_local.loaders.records import RecordMapping
    from medhelm_local.loaders.tabular import READER_KEYS

    return unknown_field_hint(exc, BenchmarkSpec.model_fields, [*RecordMapping.model_fields, *READER_KEYS],
                              "under loader_options", model=BenchmarkSpec)


def _check_template(path: Path, name: str, template: str) -> None:
    try:
        parsed = [(f, spec) for _, f, spec, _ in string.Formatter().parse(template) if f is not None]
    except ValueError:
        raise BadInputError(
            f"{path}: field {name} is not a valid template (use {{field}}, and {{{{ }}}} for literal braces)"
        ) from None
    for field, format_spec in parsed:
        if not field.isidentifier():
            raise BadInputError(f"{path}: field {name} uses {{{field}}}; template fields must be plain names")
        # A field inside a format spec ({question:{context}}) is filled too, but unseen by template_fields: every
        # check of the fields a template names would miss it, and the filled value becomes the format spec, which
        # Python's error then quotes (an extract's text).
        if format_spec and "{" in format_spec:
            raise BadInputError(f"{path}: field {name} uses {{{field}:{format_spec}}}; a field may not sit inside "
                                "another's format spec")


def register_custom_spec(path: Path, home: Path) -> BenchmarkSpec:
    """Validate ``path`` and store it as ``<home>/benchmarks/<id>.yaml`` (replacing an earlier version)."""
    spec = load_custom_spec(path)
    folder = custom_dir(home)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = folder / f"{spec.id}.yaml"
    data = spec.model_dump(mode="json", exclude_none=True)
    text = "# Custom benchmark registered with medhelm-local (bring your own extract).\n"
    text += yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110)
    atomic_write(target, text.encode("utf-8"))
    return spec


def remove_custom_spec(benchmark_id: str, home: Path) -> None:
    file = custom_dir(home) / f"{benchmark_id}.yaml"
    if not file.is_file():
        raise NotFoundError(f"no custom benchmark {benchmark_id!r} in {custom_dir(home)}")
    file.unlink()
