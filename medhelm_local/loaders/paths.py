"""Paths a spec names (``glob``, ``sibling_files``, ``sibling_text``, ``ehr_dir``, ``source_glob``...) stay inside
the extract's folder.

A pattern is relative: an absolute path, a drive, ``~`` or a ``..`` part is refused before anything is read, and
every match is resolved (symlinks included) and must lie inside the resolved folder. Anything else is a
:class:`SpecPathError` (exit 2) naming the option and the pattern, never a file's content.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from medhelm_local.errors import BadInputError

if TYPE_CHECKING:
    from medhelm_local.home import Home

_DRIVE = re.compile(r"^[A-Za-z]:")


class SpecPathError(BadInputError):
    """A path a spec names is absolute, climbs out of the extract's folder, or resolves outside it."""


class ApplianceFileRefused(BadInputError):
    """An extract, or a file a spec names, is one of the appliance's own files (keys, store, audit trail) or a
    model's API key."""


def extract_folder(path: Path) -> Path:
    """The folder a spec's paths are relative to: the extract itself when it is a folder, else its parent."""
    return path if path.is_dir() else path.parent


def check_pattern(pattern: object, option: str, folder: Path) -> str:
    """``pattern`` as a relative pattern inside ``folder``; refused (exit 2) when it could reach outside."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise SpecPathError(f"loader option {option}: expected a non-empty relative file name or glob pattern")
    posix, windows = PurePosixPath(pattern), PureWindowsPath(pattern)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or _DRIVE.match(pattern) \
            or pattern.startswith(("~", "\\")):
        raise SpecPathError(f"loader option {option}: {pattern!r} is an absolute path; paths in a spec are "
                            f"relative to the extract's folder {folder}")
    if ".." in posix.parts or ".." in windows.parts:
        raise SpecPathError(f"loader option {option}: {pattern!r} climbs out of the extract's folder {folder} "
                            "('..' is refused)")
    return pattern


def inside(candidate: Path, folder: Path, what: str) -> Path:
    """``candidate`` resolved (symlinks followed); refused unless it lies inside ``folder`` (resolved). ``what``
    names where the path came from (e.g. "loader option glob ('*.csv')")."""
    root = folder.resolve()
    try:
        resolved = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        raise SpecPathError(f"{what}: {candidate} cannot be resolved (a broken or looping symlink?)") from None
    if resolved != root and not resolved.is_relative_to(root):
        raise SpecPathError(f"{what}: {candidate} resolves outside the extract's folder {root} (a symlink?); "
                            "a registration reads files inside that folder only")
    return resolved


def confined_glob(folder: Path, pattern: object, option: str) -> list[Path]:
    """The files and folders matching ``pattern`` in ``folder``, each checked to resolve inside it, sorted."""
    checked = check_pattern(pattern, option, folder)
    matches = sorted(folder.glob(checked))
    for match in matches:
        inside(match, folder, f"loader option {option} ({checked!r})")
    return matches


def confined_child(folder: Path, name: object, option: str) -> Path:
    """``folder / name`` for a relative ``name`` that must resolve inside ``folder`` (it need not exist)."""
    checked = check_pattern(name, option, folder)
    child = folder / checked
    if child.exists() or child.is_symlink():
        inside(child, folder, f"loader option {option} ({checked!r})")
    return child


def refuse_appliance_files(home: Home, files: list[Path]) -> None:
    """No extract, and no file a spec names beside it, is read from the appliance's own keys, store or audit
    folders, nor is a model's API key (its ``api_key_file``, the environment under /proc): a spec cannot put the
    store's data key, the signing key or a model server's key into a prompt."""
    for file in files:
        place = home.appliance_place(file)
        if place is not None:
            raise ApplianceFileRefused(f"{file}: lies in the appliance's {place}; extracts and the files a spec "
                                       "names are never read from there")
        secret = home.model_secret(file)
        if secret is not None:
            raise ApplianceFileRefused(f"{file}: is {secret}; extracts and the files a spec names are never read "
                                       "from there")
