"""`run`'s flags map to one evaluation mode; contradictory ones are refused with exit-2 errors."""

from __future__ import annotations

import re

import pytest

from medhelm_local.application.evaluation import Mode
from medhelm_local.errors import BadInputError


def test_flags_map_to_one_mode() -> None:
    assert Mode.from_flags() == Mode("new")
    assert Mode.from_flags(run_id="r1", new_run=True) == Mode("new", "r1", always_new=True)
    assert Mode.from_flags(resume="r1") == Mode("resume", "r1")
    assert Mode.from_flags(retry_errors="r1") == Mode("retry_errors", "r1")
    assert Mode.from_flags(shard=(1, 3)) == Mode("shard", None, shard=(1, 3))
    shard = Mode.from_flags(shard=(1, 3), run_id="r1")
    assert (shard.kind, shard.run_id, shard.shard_label) == ("shard", "r1", "1/3")
    assert Mode.from_flags(resume="r1").shard_label is None
    assert Mode.from_flags(resume="r1", run_id="r1") == Mode("resume", "r1")


@pytest.mark.parametrize(("flags", "message"), [
    ({"resume": "a", "retry_errors": "b"}, "--resume and --retry-errors: give one of them"),
    ({"shard": (0, 2), "resume": "a"}, "--shard: use --run-id"),
    ({"shard": (0, 2), "retry_errors": "a"}, "--shard: use --run-id"),
    ({"shard": (0, 2), "new_run": True}, "--shard: use --run-id"),
    ({"resume": "a", "new_run": True}, "--new-run and a different --run-id do not apply"),
    ({"retry_errors": "a", "new_run": True}, "--new-run and a different --run-id do not apply"),
    ({"resume": "a", "run_id": "b"}, "--new-run and a different --run-id do not apply"),
])
def test_contradictory_flags_are_refused(flags: dict[str, object], message: str) -> None:
    with pytest.raises(BadInputError, match=re.escape(message)):
        Mode.from_flags(**flags)  # type: ignore[arg-type]


@pytest.mark.parametrize(("index", "count"), [(2, 2), (-1, 2), (0, 0)])
def test_a_shard_outside_its_partition_is_refused(index: int, count: int) -> None:
    with pytest.raises(BadInputError, match=r"index must be in 0\.\.N-1"):
        Mode.of_shard(index, count)
