"""The loader registry and the checks every loader shares.

A loader is a function ``(spec, path) -> LoadResult``; which one runs is data (``spec.input_format``).
Loaders raise :class:`~medhelm_local.errors.ExtractError` naming file, row and column; they never include
cell values in messages, since those may be patient text.
"""

from __future__ import annotations

import hashlib
import importlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError, NotFoundError, Place
from medhelm_local.loaders.paths import SpecPathError, extract_folder, inside
from medhelm_local.records import Instance

# The built-in loaders by input format: a module is imported (and registers itself) when a spec names one of its
# formats, so checking three specs does not import eleven loaders and their XML, SQLite and MEDS readers.
_LOADER_MODULES = {
    "pubmedqa_json": "medhelm_local.loaders.pubmedqa",
    "table": "medhelm_local.loaders.tabular",
    "private_table": "medhelm_local.loaders.tabular",
    "headqa_json": "medhelm_local.loaders.headqa",
    "mediqa_xml": "medhelm_local.loaders.mediqa",
    "mtsamples_txt": "medhelm_local.loaders.mtsamples",
    "line_pairs": "medhelm_local.loaders.line_pairs",
    "dischargeme_csv": "medhelm_local.loaders.dischargeme",
    "medalign_tsv": "medhelm_local.loaders.medalign",
    "ehrshot_meds": "medhelm_local.loaders.meds",
    "n2c2_xml": "medhelm_local.loaders.n2c2",
    "omop_cdm": "medhelm_local.loaders.omop",
}


@dataclass
class LoadResult:
    instances: list[Instance]
    files: list[Path]
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def fingerprint(self) -> str:
        return fingerprint_files(self.files)


Loader = Callable[[BenchmarkSpec, Path], LoadResult]
_LOADERS: dict[str, Loader] = {}
_GIVES: dict[str, frozenset[str]] = {}


def register_loader(name: str, *, gives: frozenset[str] | None = None) -> Callable[[Loader], Loader]:
    """Register ``fn`` as the loader of ``input_format`` ``name``. ``gives``: the instance fields a scorer reads
    (``label``, ``references``, ``meta.<key>``) that it gives every instance, whatever the spec; None where they
    follow from the spec's loader options (the table loaders)."""

    def decorate(fn: Loader) -> Loader:
        if name in _LOADERS and _LOADERS[name] is not fn:
            raise RuntimeError(f"loader {name!r} registered twice")
        _LOADERS[name] = fn
        if gives is not None:
            _GIVES[name] = gives
        return fn

    return decorate


def declared_fields(name: str) -> frozenset[str] | None:
    """The fields the loader of ``name`` declares it gives every instance (None: none declared)."""
    _ensure_registered(name)
    return _GIVES.get(name)


def _ensure_registered(name: str) -> None:
    """Import the built-in module of input format ``name``, if there is one, so that its loader is registered."""
    module = _LOADER_MODULES.get(name)
    if module is not None and name not in _LOADERS:
        importlib.import_module(module)


def available_loaders() -> list[str]:
    return sorted(_LOADER_MODULES.keys() | _LOADERS.keys())


def load_dataset(spec: BenchmarkSpec, path: Path) -> LoadResult:
    """Read and validate ``path`` for ``spec``; raise on the first problem, return nothing partial."""
    _ensure_registered(spec.input_format)
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or directory")
    if not (path.is_file() or path.is_dir()):  # a pipe (`<(...)`) is read once: the recorded sha256 would be of nothing
        raise BadInputError(f"{path}: expected a regular file or a folder (a pipe or device can be read only once; "
                            "copy it to a file first)")
    loader = _LOADERS.get(spec.input_format)
    if loader is None:
        raise BadInputError(f"benchmark {spec.id}: no loader for input format {spec.input_format!r}")
    result = loader(spec, path)
    check_files_inside(result, path)
    if not result.instances:
        raise ExtractError(path, "at least one instance (the file holds none)")
    check_unique_ids(result.instances, path)
    check_meta_files(spec, result, path)
    return result


def check_files_inside(result: LoadResult, path: Path) -> None:
    """Every file a loader read, besides the extract itself, resolves (symlinks included) inside the extract's
    folder: whatever loader and whatever the spec says, a registration reads nothing else."""
    folder = extract_folder(path)
    for file in result.files:
        if file != path:
            inside(file, folder, "a file read for the extract")


# Meta keys whose value is a file a metric opens (EHRSQL's SQLite database): it must be one of the files the loader
# read from inside the extract's folder (``sibling_files``), never a path a spec or an extract cell spells out.
FILE_META_KEYS = ("db_path",)


def check_meta_files(spec: BenchmarkSpec, result: LoadResult, path: Path) -> None:
    read = {f.resolve() for f in result.files}
    for position, instance in enumerate(result.instances):
        for key in FILE_META_KEYS:
            value = instance.meta.get(key)
            if value is not None and Path(str(value)).resolve() not in read:
                raise SpecPathError(
                    f"benchmark {spec.id}: meta {key} of the instance at row {position} is not a file named by "
                    f"loader option sibling_files inside the extract's folder {path if path.is_dir() else path.parent}"
                    f"; set it with sibling_files, not meta or meta_constants")


def check_unique_ids(instances: Iterable[Instance], path: Path) -> None:
    """Every loader's instances have distinct, non-empty ids. Loaders that build instances from rows check this
    themselves, naming the rows (:func:`~medhelm_local.loaders.records.build_instances`); here instances are
    numbered in the order read."""
    seen: dict[str, int] = {}
    for number, instance in enumerate(instances, start=1):
        if not instance.id.strip():
            raise ExtractError(path, "a non-empty instance id", place=Place.record(number, "instance"))
        if instance.id in seen:
            raise ExtractError(path, f"unique instance ids (this instance has the id of instance {seen[instance.id]})",
                               place=Place.record(number, "instance"))
        seen[instance.id] = number


def fingerprint_files(files: list[Path]) -> str:
    """sha256 of the bytes for one file; for several, sha256 over sorted (name, sha256) lines."""
    if len(files) == 1:
        return sha256_file(files[0])
    digest = hashlib.sha256()
    for file in sorted(files, key=lambda p: p.name):
        digest.update(f"{file.name}\t{sha256_file(file)}\n".encode())
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_label(spec: BenchmarkSpec, raw: str, path: Path, place: Place | None, column: str) -> str:
    """Map a raw label through the spec's label map and check it is one of the spec's labels."""
    value = raw.strip()
    if spec.label_map is not None:
        mapped = spec.label_map.get(value)
        if mapped is None:
            allowed = ", ".join(repr(k) for k in spec.label_map)
            # Said whatever the value (never shown): `Yes` or `YES` for a map of `yes` is the usual slip.
            raise ExtractError(path, f"a label in the label map ({allowed}; matched exactly, upper and lower case "
                               "included, spaces around it ignored: list each spelling the file uses in label_map)",
                               place=place, column=column)
        value = mapped
    if spec.labels is not None and value not in spec.labels:
        allowed = ", ".join(repr(k) for k in spec.labels)
        raise ExtractError(path, f"one of the labels {allowed}", place=place, column=column)
    return value
