"""A run's counts as `runs list`, `runs show` and the console give them: answered items are those with an
answer; a failed request is an error, never also counted as answered."""

from __future__ import annotations

import json
from pathlib import Path

from medhelm_local.store import Store
from tests.analysis.test_leaderboard_cli import answers, pubmedqa
from tests.conftest import Cli, cli_env
from tests.scoring.helpers import add_run, make_home, register


def test_a_failed_request_is_an_error_not_an_answer(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    data = pubmedqa(12)
    outputs = {i.id: (None if n < 4 else out) for n, (i, out) in enumerate(zip(data, answers(data, 6).values(),
                                                                                strict=True))}
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        run_id = add_run(store, "tiny", "pubmedqa", fingerprint, data, outputs)
        from medhelm_local.webconsole.data import _summary

        summary = _summary(home, store, store.get_run(run_id))  # type: ignore[arg-type]
    cli = Cli(home=home.root, env=cli_env())
    (listed,) = json.loads(cli("runs", "list", "--json").stdout)
    assert (listed["planned"], listed["answered"], listed["errors"]) == (12, 8, 4)  # answered was 12
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    assert (shown["answered"], shown["errors"]) == (8, 4)
    assert (summary.planned, summary.answered, summary.errors, summary.done) == (12, 8, 4, 12)
