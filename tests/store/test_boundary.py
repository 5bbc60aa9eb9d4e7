"""The store's boundary (issue 16 §2): it holds the SQL on the appliance's store and knows no domain.

Checked statically with ``ast`` over the source, lazy (function-level) imports included, so a shortcut that
only shows at run time cannot slip in."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "medhelm_local"
FORBIDDEN = ("medhelm_local.audit", "medhelm_local.benchmarks", "medhelm_local.loaders", "medhelm_local.context",
             "medhelm_local.application")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any level (``from x import y`` yields ``x`` and ``x.y``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                own = _module_name(path)
                anchor = (own if path.name == "__init__.py" else own.rpartition(".")[0]).split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _source_of(module: str) -> Path | None:
    path = PACKAGE.parent.joinpath(*module.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def _closure(start: list[Path]) -> dict[str, str]:
    """``{module reached: the module that imported it}`` over medhelm_local's own modules, from ``start``."""
    seen: dict[str, str] = {}
    todo = [(_module_name(p), p) for p in start]
    done: set[str] = set()
    while todo:
        name, path = todo.pop()
        if name in done:
            continue
        done.add(name)
        for imported in _imports(path):
            if not imported.startswith("medhelm_local"):
                continue
            seen.setdefault(imported, name)
            source = _source_of(imported)
            if source is not None and imported not in done:
                todo.append((imported, source))
    return seen


def test_the_store_imports_no_audit_benchmarks_loaders_or_context() -> None:
    store_modules = sorted((PACKAGE / "store").glob("*.py"))
    assert len(store_modules) > 5
    reached = _closure(store_modules)
    bad = {module: by for module, by in reached.items() if module.startswith(FORBIDDEN)}
    assert bad == {}, f"the store reaches {bad} (module: imported by)"


def test_the_check_finds_a_forbidden_import(tmp_path: Path) -> None:
    """The check itself can fail: a lazy import inside a function is seen."""
    module = PACKAGE / "store" / "store.py"
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from medhelm_local.audit.trail import audit_event\n    return audit_event\n")
    assert "medhelm_local.audit.trail" in _imports(probe)
    assert "medhelm_local.sinks" in _imports(module)


def _calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]


def test_every_store_opening_passes_an_audit_sink() -> None:
    """A data-key rotation that crashed after its point of no return is finished by the next ``Store.open`` and
    recorded through the sink it is given: a front end that forgot it would lose that record."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _calls(path):
            func = call.func
            if (isinstance(func, ast.Attribute) and func.attr == "open" and isinstance(func.value, ast.Name)
                    and func.value.id == "Store" and not any(k.arg == "audit" for k in call.keywords)):
                missing.append(f"{path.relative_to(PACKAGE)}:{call.lineno}")
    assert missing == []


def test_no_sql_on_the_store_outside_it() -> None:
    """Only store/ reaches the store's connection (``store.conn``)."""
    outside = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("store/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Attribute) and n.attr in ("conn", "_conn") for n in ast.walk(tree)):
            outside.add(relative)
    assert sorted(outside) == []
