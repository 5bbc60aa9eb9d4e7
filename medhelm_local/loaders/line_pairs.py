"""Line-aligned source/target files (MIMIC-RRS): line *i* of the findings file pairs with line *i* of the
impression file.

``loader_options``: ``source_glob`` (default ``*findings*``), ``target_glob`` (default ``*impression*``),
``source_field`` (default ``findings``). Pairs are matched by the part of the file name before the glob's
keyword (``test.findings.tok`` with ``test.impression.tok``). Instance id: ``<pair>:<line>`` (0-based line),
or the line number alone for a single pair. A pair of empty lines is skipped and counted; one empty side is an
error. Meta: ``split`` (the pair's name).
"""

from __future__ import annotations

from pathlib import Path

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders.base import LoadResult, register_loader
from medhelm_local.loaders.io import Row, Table, read_text
from medhelm_local.loaders.paths import confined_glob
from medhelm_local.loaders.records import RecordMapping, build_instances, check_option_keys, mapping_fields


def _key(file: Path, keyword: str) -> str:
    name = file.name
    index = name.lower().find(keyword.lower())
    return name[:index].rstrip("._-") if index > 0 else ""


def _lines(text: str) -> list[str]:
    """Lines split on newlines only (report text may hold other Unicode line separators)."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    return lines[:-1] if lines and not lines[-1] else lines


MAPPING = RecordMapping(id_column="id", reference_columns=["target"], meta={"split": "split"})  # + the source field


@register_loader("line_pairs", gives=mapping_fields(MAPPING))
def load_line_pairs(spec: BenchmarkSpec, path: Path) -> LoadResult:
    check_option_keys(spec, {"source_glob", "target_glob", "source_field"})
    options = spec.loader_options
    source_glob = str(options.get("source_glob", "*findings*"))
    target_glob = str(options.get("target_glob", "*impression*"))
    field = str(options.get("source_field", "findings"))
    folder = path if path.is_dir() else path.parent
    source_kw, target_kw = source_glob.strip("*"), target_glob.strip("*")
    sources = {_key(f, source_kw): f for f in confined_glob(folder, source_glob, "source_glob") if f.is_file()}
    targets = {_key(f, target_kw): f for f in confined_glob(folder, target_glob, "target_glob") if f.is_file()}
    if not path.is_dir():
        key = _key(path, source_kw)
        sources = {key: path} if key in sources else {}
    if not sources:
        raise ExtractError(path, f"a file matching {source_glob!r}")
    table = Table(files=[])
    multi = len(sources) > 1
    for key, source in sorted(sources.items()):
        target = targets.get(key)
        if target is None:
            raise ExtractError(source, f"a matching {target_glob!r} file beside it")
        source_lines = _lines(read_text(source))
        target_lines = _lines(read_text(target))
        if len(source_lines) != len(target_lines):
            raise ExtractError(
                target, f"as many lines as {source.name} ({len(source_lines)}), found {len(target_lines)}"
            )
        table.files.extend([source, target])
        table.headers[source] = ["id", field, "target", "split"]
        for line_no, (src, tgt) in enumerate(zip(source_lines, target_lines, strict=True)):
            if not src.strip() and not tgt.strip():
                table.skipped["blank line pair"] += 1
                continue
            for file, text in ((source, src), (target, tgt)):
                if not text.strip():
                    raise ExtractError(file, "a non-empty line (its pair is not empty)", place=Place.line(line_no + 1))
            instance_id = f"{key or source.stem}:{line_no}" if multi else str(line_no)
            table.rows.append(
                Row(source, line_no, {"id": instance_id, field: src.strip(), "target": tgt.strip(), "split": key},
                    Place.line(line_no + 1))
            )
    instances, skipped = build_instances(spec, table, MAPPING.model_copy(update={"fields": {field: field}}))
    return LoadResult(instances=instances, files=table.files, skipped=skipped)
