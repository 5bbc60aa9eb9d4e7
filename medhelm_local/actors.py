"""Who acted, as the audit trail names them: an account or a sign-in subject, never free text.

An identity a user states (``--actor``, ``$MEDHELM_ACTOR``) or the console's proxy asserts is written into every
audit record, ``audit report`` and its PDF, and the console's audit view, so it is held to the shape of an
identifier: a user name's characters, no date or other PHI pattern, a few words at most, and no encoded text but
one opaque id (a UUID, ``auth0|5f7c...``, an identity provider's pairwise subject). The checks are the export
scan's own (:mod:`medhelm_local.phi_text`). A refusal says what was wrong, never the value.

A staff number has a record number's shape (``e1234567``): where the deployment's configuration names the site's
form (``identity.staff_id_pattern``), a name or subject part matching it whole is not read as a record number. It
is still read for dates, SSNs, phone numbers and ZIP codes, and the name for words and encodings."""

from __future__ import annotations

import re
from collections.abc import Callable

from medhelm_local.errors import BadInputError
from medhelm_local.patterns import ACTOR, describe
from medhelm_local.phi_text import PATTERNS, looks_encoded, name_phi_problem, variants

MAX_WORDS = 6
MAX_OPAQUE_ID = 48  # an Entra ID pairwise subject has 43; a UUID 36
SERVICE_ACCOUNT = "system:serviceaccount:"  # Kubernetes' own prefix, not words anyone chose
_SHAPE = re.compile(ACTOR)
# Email is a sign-in name's shape; the address and URL patterns need spaces or '/', which the shape refuses.
_PHI_PATTERNS = ("ssn", "phone", "zip_code")  # and "mrn", read after the site's staff numbers are set aside
# A canonical UUID (Keycloak's and Entra ID's subjects): random digits, not read for dates or record numbers.
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_PART_SEPARATOR = re.compile(r"[|:@]")
_PARTS_AND_SEPARATORS = re.compile(f"({_PART_SEPARATOR.pattern})")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")  # AdaQuillonby is two words, as a reader sees it

REASONS = {
    "shape": "it holds a space or another character not allowed, or is longer than 128 characters",
    "date": "it holds a date",
    "phi_pattern": "it has the shape of a record number, SSN, phone number or ZIP code (a staff number has a record "
                   "number's shape unless IT names the site's form in appliance.yaml: identity.staff_id_pattern)",
    "encoded": f"it holds encoded text beyond one opaque id of at most {MAX_OPAQUE_ID} characters",
    "words": f"it holds more than {MAX_WORDS} words",
}
ACTOR_FORM = ("a user name or sign-in subject, e.g. alice, alice@hospital.org, auth0|123, "
              "system:serviceaccount:medhelm:runner or a UUID: " + describe(ACTOR) + f"; no dates, at most "
              f"{MAX_WORDS} words and one opaque id")


def actor_problem(value: str, staff_ids: re.Pattern[str] | None = None) -> str | None:
    """Why ``value`` cannot name an actor (a key of :data:`REASONS`), or None where it can; ``staff_ids``: the
    site's staff number form (``identity.staff_id_pattern``), a part matching it whole read as no record number."""
    if not _SHAPE.fullmatch(value):
        return "shape"
    blanked = _UUID.sub("-", value)
    problem = name_phi_problem(blanked, _PHI_PATTERNS)
    if problem is not None:
        return problem
    if any(PATTERNS["mrn"].search(form) for form in variants(_without_staff_ids(blanked, staff_ids))):
        return "phi_pattern"
    parts = _PART_SEPARATOR.split(value.removeprefix(SERVICE_ACCOUNT))
    opaque = max((p for p in parts if looks_encoded(p)), key=len, default=None)
    if opaque is not None:
        if len(opaque) > MAX_OPAQUE_ID:
            return "encoded"
        parts.remove(opaque)
    rest = ":".join(parts)
    if looks_encoded(rest):
        return "encoded"
    if len(_WORD.findall(rest)) > MAX_WORDS:
        return "words"
    return None


def _without_staff_ids(value: str, staff_ids: re.Pattern[str] | None) -> str:
    """``value`` with each part (between ``|``, ``:`` and ``@``) that is a staff number set aside."""
    if staff_ids is None:
        return value
    pieces = _PARTS_AND_SEPARATORS.split(value)
    return "".join("-" if staff_ids.fullmatch(piece) else piece for piece in pieces)


def site_actor_problem(value: str, site_staff_ids: Callable[[], re.Pattern[str] | None] | None) -> str | None:
    """:func:`actor_problem`, the site's staff number form read (``site_staff_ids``) only where ``value`` has a
    record number's shape: most names never need the configuration for it."""
    reason = actor_problem(value)
    if reason == "phi_pattern" and site_staff_ids is not None:
        reason = actor_problem(value, site_staff_ids())
    return reason


def check_actor(value: str, source: str, site_staff_ids: Callable[[], re.Pattern[str] | None] | None = None) -> str:
    """``value`` where it can name an actor; else :class:`BadInputError` naming ``source`` (``--actor``), the
    reason and the form expected, never the value. ``site_staff_ids``: as for :func:`site_actor_problem`."""
    reason = site_actor_problem(value, site_staff_ids)
    if reason is not None:
        raise BadInputError(f"{source}: not a user name or sign-in subject ({REASONS[reason]}); expected "
                            f"{ACTOR_FORM}. Nothing was done or recorded.")
    return value
