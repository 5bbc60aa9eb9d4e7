"""Blinded clinician rating: which responses are rated, in which order, by whom.

The sample is stratified: from every (run, benchmark) stratum of answered items on a jury-scored, open-ended
benchmark (a run is one model), ``per_stratum`` items are drawn by a hash of their ids, so the sample is the same
for every clinician and every page load, and grows only when runs are added. Each clinician gets the items in
an order of their own (a hash of their name and the item), items already started by another clinician first so
each item reaches ``raters_per_item`` clinicians; a clinician never rates an item twice and never sees which
model wrote a response.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from medhelm_local.store.ratings import ClinicianRating
from medhelm_local.webconsole.data import RatableResponse


def item_key(item: RatableResponse) -> str:
    return f"{item.run_id}\x00{item.benchmark}\x00{item.instance_id}"


def _rank(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def stratified_sample(frame: Sequence[RatableResponse], per_stratum: int) -> list[RatableResponse]:
    strata: dict[tuple[str, str], list[RatableResponse]] = {}
    for item in frame:
        strata.setdefault((item.run_id, item.benchmark), []).append(item)
    sample = []
    for _, items in sorted(strata.items()):
        sample += sorted(items, key=lambda i: _rank("sample", item_key(i)))[:per_stratum]
    return sample


def _counts(ratings: Sequence[ClinicianRating]) -> Counter[str]:
    return Counter(f"{r.run_id}\x00{r.benchmark}\x00{r.instance_id}" for r in ratings)


def queue(sample: Sequence[RatableResponse], ratings: Sequence[ClinicianRating], rater: str,
          raters_per_item: int) -> list[RatableResponse]:
    """The items this clinician may still rate, in their own randomised order (started items first)."""
    counts = _counts(ratings)
    mine = {f"{r.run_id}\x00{r.benchmark}\x00{r.instance_id}" for r in ratings if r.rater == rater}
    open_items = [i for i in sample if item_key(i) not in mine and counts[item_key(i)] < raters_per_item]
    return sorted(open_items, key=lambda i: (-counts[item_key(i)], _rank("order", rater, item_key(i))))


@dataclass
class Progress:
    items: int
    complete: int  # items rated by at least raters_per_item clinicians
    mine: int
    clinicians: int


def progress(sample: Sequence[RatableResponse], ratings: Sequence[ClinicianRating], rater: str,
             raters_per_item: int) -> Progress:
    keys = {item_key(i) for i in sample}
    counts = _counts([r for r in ratings if f"{r.run_id}\x00{r.benchmark}\x00{r.instance_id}" in keys])
    return Progress(items=len(keys), complete=sum(1 for k in keys if counts[k] >= raters_per_item),
                    mine=sum(1 for r in ratings if r.rater == rater), clinicians=len({r.rater for r in ratings}))
