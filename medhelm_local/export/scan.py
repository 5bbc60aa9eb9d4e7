"""The string scan: every string in a candidate bundle against the vocabulary, PHI patterns and extract terms.

Findings name the file, the location and the rule, never the offending string (it may be PHI).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from medhelm_local.phi_text import PATTERNS, looks_encoded, variants
from medhelm_local.store.exports import instance_payloads
from medhelm_local.store.store import Store

_TOKEN = re.compile(r"[A-Za-z0-9]+")
# A word starting with a capital, as names are written: "Okafor", "OKAFOR, MARGARET" (the form EHR systems print),
# "McDonald", "Smith-Jones", "O'Brien"; each of its letter runs is a term.
_NAME_WORD = re.compile(r"\b[A-Z][A-Za-z]*(?:['-][A-Za-z]+)*")
_IDENTIFIER = re.compile(r"\b(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9-]{5,}\b|\b\d{5,}\b")
NUMERIC = re.compile(r"^[-+]?[\d.,]+(?:e[-+]?\d+)?%?$|^$")  # 3.47e-05: a small cost as written
_LONG_INTEGER = re.compile(r"^\d{5,}$")


@dataclass(frozen=True)
class Finding:
    file: str
    location: str
    rule: str


def _walk_json(value: Any, path: str = "$", names: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """Every string (keys included) with its location. A key is named in a location only when it is one of
    ``names`` (the schema's own); any other key (a run id, a model name) is located by position, so a finding
    never quotes it."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for index, (key, item) in enumerate(value.items()):
            where = f"{path}.{key}" if key in names else f"{path}{{key {index}}}"
            yield where, str(key)
            yield from _walk_json(item, where, names)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_json(item, f"{path}[{index}]", names)


class _TextCollector(HTMLParser):
    """Text nodes and human-readable attributes of the HTML report; flags references to anything outside."""

    READABLE = frozenset({"title", "alt", "aria-label", "aria-description", "placeholder", "content"})
    REFERENCES = frozenset({"src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.strings: list[tuple[str, str]] = []
        self.external: list[str] = []
        self._stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._stack.append(tag)
        if tag in ("script", "link", "iframe", "object", "embed", "img", "image", "use", "base"):
            self.external.append(f"<{tag}>")
        for name, value in attrs:
            if name in self.REFERENCES and value and not value.startswith("#"):
                self.external.append(f"<{tag} {name}>")
            if name == "style" and value and "url(" in value.lower():
                self.external.append(f"<{tag} style url()>")
            if name in self.READABLE and value and not (tag == "meta" and name == "content"):
                self.strings.append((f"<{tag} {name}>", value))

    def handle_endtag(self, tag: str) -> None:
        if self._stack:
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if not text:
            return
        where = self._stack[-1] if self._stack else "document"
        if where == "style":
            if "url(" in text.lower() or "@import" in text.lower():
                self.external.append("<style> url()/@import")
            return
        self.strings.append((f"<{where}> text", text))


def strings_of(name: str, data: bytes, names: Iterable[str] = ()) -> tuple[list[tuple[str, str]], list[str]]:
    """Every string a reader of the file sees, with its location (JSON keys named only when in ``names``); and
    any external reference (HTML)."""
    text = data.decode("utf-8")
    if name.endswith(".json"):
        return list(_walk_json(json.loads(text), names=frozenset(names))), []
    if name.endswith(".csv"):
        rows = csv.reader(io.StringIO(text))
        return [(f"row {r} column {c}", cell) for r, row in enumerate(rows, start=1)
                for c, cell in enumerate(row, start=1)], []
    if name.endswith(".html"):
        collector = _TextCollector()
        collector.feed(text)
        collector.close()
        return collector.strings, collector.external
    return [("file", text)], []


def vocabulary_tokens(strings: Iterable[str]) -> set[str]:
    return {t.lower() for s in strings for t in _TOKEN.findall(s)}


def extract_terms(store: Store, datasets: Iterable[tuple[str, str]], *, min_length: int,
                  vocabulary: set[str]) -> set[str]:
    """Names and identifiers seen in the registered extracts (instance ids, words starting with a capital,
    all-capital ones included, ids with digits), minus the words of the appliance's own fixed vocabulary
    (``vocabulary``: schema keys, fixed report text; never text a user wrote, such as a custom spec). Read from the
    encrypted store; in memory."""
    terms: set[str] = set()

    def add_text(text: str) -> None:
        for word in _NAME_WORD.findall(text):
            terms.update(t.lower() for t in _TOKEN.findall(word) if len(t) >= min_length)
        for ident in _IDENTIFIER.findall(text):
            terms.update(t.lower() for t in _TOKEN.findall(ident) if len(t) >= min_length)

    for benchmark, fingerprint in sorted(set(datasets)):
        for instance_id, payload in instance_payloads(store, benchmark, fingerprint):
            terms.update(t.lower() for t in _TOKEN.findall(instance_id)
                         if len(t) >= 5 or (len(t) >= min_length and re.search(r"[A-Za-z]", t)))
            for value in _walk_json(json.loads(payload)):
                add_text(value[1])
    return {t for t in terms if t not in vocabulary and len(t) >= min_length}


# Values this appliance generates in fixed formats that cannot carry text: sha256 hashes, UTC timestamps,
# export request ids, OpenSSH key fingerprints, base64 Ed25519 signatures (the audit checkpoint's).
# Everything else (run ids, model names, names) is scanned.
GENERATED = re.compile(
    r"^(?:[0-9a-f]{64}|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z|exp-\d{8}T\d{6}Z-[0-9a-f]{6}|SHA256:[A-Za-z0-9+/]{43}"
    r"|[A-Za-z0-9+/]{86}==)$")


def scan_strings(file: str, strings: list[tuple[str, str]], *, patterns: list[str], terms: set[str],
                 allowed: set[str] | None, fixed: set[str]) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """Returns (not in the vocabulary, PHI pattern matches, extract-term matches).

    ``fixed`` is the appliance's own text (schema keys, fixed report text, notes, shipped benchmark, category
    and metric names): exempt. Every other string (run ids, model names, requester and appliance names,
    custom benchmark ids) is scanned, except values in a generated fixed format (hashes, timestamps)."""
    vocab_findings, pattern_findings, term_findings = [], [], []
    compiled = [(name, PATTERNS[name]) for name in patterns]
    for location, value in strings:
        if value in fixed or GENERATED.match(value):
            continue
        # A number written as text (a CSV or HTML cell) is allowed, but still scanned: a model name or run id
        # made of digits alone ("7730019942") is a string that looks like a number.
        if allowed is not None and value not in allowed and not NUMERIC.match(value):
            vocab_findings.append(Finding(file, location, "not in the export vocabulary"))
        forms = variants(value)
        for name, pattern in compiled:
            if any(pattern.search(form) for form in forms):
                pattern_findings.append(Finding(file, location, f"PHI pattern {name}"))
        if not NUMERIC.match(value) and looks_encoded(value):
            pattern_findings.append(Finding(file, location, "encoded text (a long hex, base64 or digit run)"))
        # Published numbers are not matched against extract terms (a score's digits are not an identifier), but a
        # whole number of 5 or more digits is: it may be an extract's identifier standing in for a name.
        numeric = NUMERIC.match(value)
        if (not numeric or _LONG_INTEGER.match(value)) and {t.lower() for t in _TOKEN.findall(value)} & terms:
            term_findings.append(Finding(file, location, "name or identifier seen in a registered extract"))
    return vocab_findings, pattern_findings, term_findings
