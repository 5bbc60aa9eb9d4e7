"""Issue 12 §6: real discharge summaries are longer than Python's default CSV field limit (128 KiB). A field of a
few MiB registers; past the configurable cap (appliance.yaml loaders.csv_field_max_mib, env
MEDHELM_CSV_FIELD_MAX_MIB, default 16 MiB) the error names the file, the row and how to raise the cap."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.errors import ConfigError, ExtractError
from medhelm_local.loaders import load_dataset
from medhelm_local.loaders.io import DEFAULT_CSV_FIELD_MIB, csv_field_cap
from tests.conftest import Cli

SENTENCE = "Patient admitted with dyspnea; course complicated by fluid overload, diuresed, discharged home. "


def _hospice_csv(path: Path, note_chars: int, rows: int = 3, long_row: int = 1) -> Path:
    note = (SENTENCE * (note_chars // len(SENTENCE) + 1))[:note_chars]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", "context", "label"])
        for i in range(rows):
            writer.writerow(["Refer to hospice? A. Yes B. No", note if i == long_row else "Short note.", "A"])
    return path


def test_default_cap_is_at_least_4_mib() -> None:
    assert DEFAULT_CSV_FIELD_MIB >= 4


def test_a_5_mib_discharge_summary_registers(home_cli: Cli, tmp_path: Path) -> None:
    data = _hospice_csv(tmp_path / "hospice.csv", 5 << 20)
    result = home_cli("datasets", "register", "hospice_referral", str(data), "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict) and payload["instances"] == 3


def test_a_field_past_the_env_cap_names_the_file_row_and_setting(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDHELM_CSV_FIELD_MAX_MIB", "1")
    data = _hospice_csv(tmp_path / "hospice.csv", (1 << 20) + 10, rows=4, long_row=2)
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("hospice_referral"), data)
    error = caught.value
    assert error.file == str(data) and str(error.place) == "row 4 (the 3rd data row)"  # header row 1
    assert "at most 1 MiB" in str(error) and "MEDHELM_CSV_FIELD_MAX_MIB" in str(error)
    assert "csv_field_max_mib" in str(error)
    assert SENTENCE.strip() not in str(error)


def test_the_cap_from_appliance_yaml_applies_to_registration(home_cli: Cli, tmp_path: Path) -> None:
    config_path = home_cli.home / "appliance.yaml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["loaders"] = {"csv_field_max_mib": 1}
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    data = _hospice_csv(tmp_path / "hospice.csv", 2 << 20)
    result = home_cli("datasets", "register", "hospice_referral", str(data))
    assert result.code == 2, result.stderr
    assert "at most 1 MiB" in result.stderr and "row 3 (the 2nd data row)" in result.stderr


def test_the_block_cap_and_a_bad_env_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _hospice_csv(tmp_path / "hospice.csv", (1 << 20) + 10)
    with csv_field_cap(1), pytest.raises(ExtractError, match="at most 1 MiB"):
        load_dataset(shipped_spec("hospice_referral"), data)
    assert len(load_dataset(shipped_spec("hospice_referral"), data).instances) == 3  # the default cap again
    monkeypatch.setenv("MEDHELM_CSV_FIELD_MAX_MIB", "lots")
    with pytest.raises(ConfigError, match="MEDHELM_CSV_FIELD_MAX_MIB"):
        load_dataset(shipped_spec("hospice_referral"), data)


def test_a_csv_is_read_in_about_twice_its_size_of_memory(tmp_path: Path) -> None:
    """The CSV reader read through io.StringIO, a copy of the text at 4 bytes a character: a 315 MB extract took
    2.0 GB to register (1.3 GB now), and one of about 1.2 GB was killed at the chart's 8 GiB limit, no message."""
    import tracemalloc

    from medhelm_local.loaders.io import read_table_file

    note = (SENTENCE * 50)[:4000]
    path = tmp_path / "hospice.csv"
    path.write_text("prompt,context,label\n" + f'Refer?,"{note}",A\n' * 2000, encoding="utf-8")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        read = read_table_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(read.rows) == 2000
    assert peak < 3 * size  # the file's bytes, its text, and the rows' text; was 6 times its size
