"""Text that may carry patient data, as the appliance recognises it: the PHI patterns and the encoded-text rule
("long encodings are blocked"). The export scan reads every string that leaves with them, and the audit trail's
checks every name a user chooses that the trail records: the actor (:mod:`medhelm_local.actors`), a custom
benchmark id, a ``--run-id``; kept apart from the scan so a command checks a name without loading the store."""

from __future__ import annotations

import re

PATTERNS: dict[str, re.Pattern[str]] = {
    "mrn": re.compile(r"\b(?:MRN|MR#|medical\s+record)\b|\b[A-Z]{1,4}[-#]?\d{6,10}\b|\b\d{7,10}\b", re.IGNORECASE),
    "ssn": re.compile(r"\b\d{3}-\d{2}-\d{4}\b"),
    "phone": re.compile(r"(?:\+?\d{1,2}[\s.-]?)?(?:\(\d{3}\)|\b\d{3})[\s.-]\d{3}[\s.-]\d{4}\b"),
    "email": re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    "date": re.compile(
        r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}\b|"
        r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?\b",
        re.IGNORECASE,
    ),
    "address": re.compile(
        r"\b\d{1,6}\s+(?:[A-Za-z]+\s+){1,4}(?:street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|"
        r"court|ct|way|place|pl|terrace|parkway|pkwy)\b\.?|\b(?:p\.?\s?o\.?\s+box|apt\.?\s*#?\s*\d+)",
        re.IGNORECASE,
    ),
    "zip_code": re.compile(r"\b\d{5}(?:-\d{4})\b|\b[A-Z]{2}\s+\d{5}\b"),
    "url": re.compile(r"\b(?:https?|ftp)://|\bwww\.", re.IGNORECASE),
}


# Text encoded to slip past the patterns and extract terms: "run-4d617267617265742d4f6b61666f72" is a name in hex.
# A long token mixing letters and digits (base64, base32), 16 or more hex characters in hex tokens that hold a
# digit, or 16 or more digits in one string. In the export scan, what the appliance generates is exempt (its
# GENERATED formats; its run ids are passed as ``fixed``).
_ENCODING_TOKENS = re.compile(r"[A-Za-z0-9+/=]+")
_MIXED_TOKEN = re.compile(r"(?=[^\d]*\d)(?=[^A-Za-z]*[A-Za-z])[A-Za-z0-9+/=]{16,}")
_HEX_TOKEN = re.compile(r"(?=\D*\d)[0-9A-Fa-f]+")
ENCODED_MIN = 16


def looks_encoded(value: str) -> bool:
    tokens = _ENCODING_TOKENS.findall(value)
    return (any(_MIXED_TOKEN.fullmatch(t) for t in tokens)
            or sum(len(t) for t in tokens if _HEX_TOKEN.fullmatch(t)) >= ENCODED_MIN
            or sum(c.isdigit() for c in value) >= ENCODED_MIN)


def variants(value: str) -> list[str]:
    """The string as written and with ``_`` read as a separator (``\\b`` does not split ``mrn_7730019942``)."""
    spaced = value.replace("_", " ")
    return [value] if spaced == value else [value, spaced]


# Dates as an identifier would hold them, beyond the date pattern's own: 1960.03.04, 1960_03_04, 04_03_60, 19600304.
# A year first (1960-03-04, 1960.3.4), or last in four digits (04.03.1960), with any separators (an insider mixes
# them: 1960-03.04); day and month first with a two-digit year only with one separator twice (04.03.60): a model's
# version and size (llama-3.1-8b, qwen2.5-72b) or a release's (vllm-0.6.3, v1.0.1) are no date.
DIGIT_DATE = re.compile(r"(?<!\d)(?:\d{4}[._:|+-]\d{1,2}[._:|+-]\d{1,2}|\d{1,2}[._:|+-]\d{1,2}[._:|+-]\d{4}"
                        r"|\d{1,2}([._:|+-])\d{1,2}\1\d{2}"
                        r"|(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01]))(?!\d)")
RECORD_PATTERNS = ("ssn", "phone", "zip_code", "mrn")
# Why a name a user chose reads as patient data, in words (never the name itself).
NAME_REASONS = {
    "date": "it holds a date",
    "phi_pattern": "it has the shape of a record number, SSN, phone number or ZIP code",
    "encoded": "it holds encoded text (a long hex, base64 or digit run)",
}


def name_phi_problem(value: str, patterns: tuple[str, ...] = RECORD_PATTERNS) -> str | None:
    """Why ``value``, a name a user chose that the audit trail records, reads as patient data: ``date``,
    ``phi_pattern`` (one of ``patterns``), or None. (The encoded-text rule is the caller's: an actor may hold one
    opaque id.)"""
    forms = variants(value)
    if DIGIT_DATE.search(value) or any(PATTERNS["date"].search(form) for form in forms):
        return "date"
    if any(PATTERNS[name].search(form) for name in patterns for form in forms):
        return "phi_pattern"
    return None


def chosen_name_problem(value: str) -> str | None:
    """Why ``value`` (a custom benchmark id, a ``--run-id``) cannot name something the audit trail, the audit
    report and exports record (a key of :data:`NAME_REASONS`), or None: no date, PHI pattern or encoded text."""
    return name_phi_problem(value) or ("encoded" if looks_encoded(value) else None)


def recorded_name(name: str) -> str:
    """A name a user typed as the audit trail records it (a registered extract's or a refused spec's file name, a
    model a refused ``models`` command named): as written, or, where it reads as patient data
    (:func:`chosen_name_problem`: ``Okafor_MRN7730019942_1960-03-04.csv``), withheld, saying why in a word the trail
    keeps (``[withheld:date]``, ``[withheld:phi_pattern]``, ``[withheld:encoded]``). An extract's sha256 beside it
    still identifies the file; the store keeps its name."""
    problem = chosen_name_problem(name)
    return name if problem is None else f"[withheld:{problem}]"


def recorded_path(path: str, keep: tuple[str, ...] = ()) -> str:
    """A path a user typed (an export's destination) as the audit trail records it: each part as
    :func:`recorded_name` records a name (``/media/usb/[withheld:date]``), but the parts in ``keep`` (names the
    appliance generated: a request id, its timestamp's digits included)."""
    return "/".join(part if part in keep else part and recorded_name(part) for part in path.split("/"))
