"""Opening the store leaves the rest of the process's libraries as they were.

A store module once recorded pandas as absent (``sys.modules["pandas"] = None``) to spare DuckDB a failed import per
bound parameter; Cython-compiled modules such as pyarrow's pandas shim read that entry as a module and crashed
(``'NoneType' object has no attribute '__version__'``) in every later ``pyarrow.array`` or ``Table.from_pylist``.
The extract loaders use pyarrow in the same process as the store; the child reads its Parquet file back through
them too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.scoring.helpers import make_home

CHILD = r"""
import sys
from pathlib import Path
from medhelm_local.home import Home
from medhelm_local.loaders.io import read_table_file
from medhelm_local.store import Store
import pyarrow as pa, pyarrow.parquet as pq

with Store.open(Home(Path(sys.argv[1]))) as store:
    store.conn.execute("SELECT count(*) FROM meta WHERE key = ? AND value <> ?", ["a", "b"]).fetchall()
assert sys.modules.get("pandas", "not imported") is not None, "pandas recorded as absent"
table = pa.Table.from_pylist([{"mrn": "synthetic-1", "age": 41}, {"mrn": "synthetic-2", "age": None}])
assert pa.array(range(3)).to_pylist() == [0, 1, 2]
pq.write_table(table, sys.argv[2])
assert pq.read_table(sys.argv[2]).to_pylist() == table.to_pylist()
read = read_table_file(Path(sys.argv[2]))
assert (read.header, read.rows) == (["mrn", "age"], table.to_pylist())
print("ok")
"""


def test_pyarrow_works_in_a_process_that_opened_the_store(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", CHILD, str(home.root), str(tmp_path / "extract.parquet")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
