"""Typed access to the store. Every write that belongs together is one transaction."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
from pydantic import BaseModel, Field

from medhelm_local.home import Home
from medhelm_local.home.keys import load_data_key
from medhelm_local.records import Instance, InstanceScore
from medhelm_local.sinks import AuditSink
from medhelm_local.store.batch import ID_LIST_PARAM, ColumnBatch, id_list
from medhelm_local.store.connection import (
    REACQUIRE_WAIT_S,
    STORE_ALIAS,
    EncryptedDatabase,
    StoreError,
    lock_timeout_s,
    open_database,
)

SCHEMA_VERSION = "1"
# The migration's steps written in Python (``Store._migrate``), part of its digest: add a name when adding one,
# so that stores migrated without it are migrated again.
MIGRATION_STEPS = ("unkey_requests", "salt_dataset_digests", "digest_datasets")
# The ``meta`` key of the store's own random key for digests of instances (``instances_digest``).
DIGEST_SALT_KEY = "instances_digest_salt"


# The dataset versions with their readings' digests (None for a version the previous release registered after a
# rollback, until the next migration): the columns of ``datasets``, then ``instances_sha256``.
DATASETS_READ = "(SELECT * FROM datasets LEFT JOIN dataset_readings USING (benchmark, fingerprint))"


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@cache  # read once per process: every open of the store compares its digest
def schema_texts() -> tuple[tuple[str, str], ...]:
    """The ``schema_<stage>.sql`` files (name, text) in the order the migration runs them: core first."""
    folder = resources.files("medhelm_local.store")
    files = sorted((f for f in folder.iterdir() if f.name.startswith("schema_") and f.name.endswith(".sql")),
                   key=lambda f: (f.name != "schema_core.sql", f.name))
    return tuple((file.name, file.read_text(encoding="utf-8")) for file in files)


def schema_digest(texts: tuple[tuple[str, str], ...]) -> str:
    """The digest a store migrated by ``texts`` and this code's steps keeps in ``meta``."""
    return hashlib.sha256(json.dumps([SCHEMA_VERSION, MIGRATION_STEPS, texts]).encode()).hexdigest()


def benchmark_filter(benchmarks: Collection[str] | None) -> tuple[str, list[str]]:
    """A ``WHERE`` clause's `` AND benchmark IN (...)`` part and its parameters: nothing for None (every benchmark),
    no row for an empty collection."""
    if benchmarks is None:
        return "", []
    chosen = sorted(benchmarks)
    if not chosen:
        return " AND FALSE", []
    return f" AND benchmark IN ({', '.join('?' for _ in chosen)})", chosen


def dataset_version(source_sha256: str, loader_sha256: str, instances_sha256: str | None = None) -> str:
    """A dataset version's fingerprint: its source bytes read with one loader configuration. Where the same bytes
    and settings were read before into other instances (a release whose loader reads the file differently), the
    new reading's fingerprint also covers what was read (``instances_sha256``, keyed: see ``instances_digest``); a
    first reading keeps the fingerprint it has always had."""
    if instances_sha256 is None:
        return hashlib.sha256(f"{source_sha256}:{loader_sha256}".encode()).hexdigest()
    return hashlib.sha256(f"{source_sha256}:{loader_sha256}:{instances_sha256}".encode()).hexdigest()


# An instance as the store keeps it: its id, label and payload (the JSON of its fields, references and meta).
StoredInstance = tuple[str, str | None, str]
PAYLOAD = {"fields", "references", "meta"}


def stored_form(instance: Instance) -> StoredInstance:
    return instance.id, instance.label, instance.model_dump_json(include=PAYLOAD)


def instances_digest(rows: Iterable[StoredInstance], salt: bytes) -> str:
    """The HMAC-SHA256 of a dataset version's instances in their order, as the store keeps them, keyed by the
    store's ``salt``: an insider who reads one cell into a dataset of one instance (a query of one row) must not find
    the cell by hashing guesses (a date of birth: a century of days in a fraction of a second). Neither the JSON of
    ``[id, label]`` nor a payload holds a raw NUL or newline, so the framing is unambiguous."""
    digest = hmac.new(salt, digestmod=hashlib.sha256)
    for instance_id, label, payload in rows:
        digest.update(f"{json.dumps([instance_id, label])}\0{payload}\n".encode())
    return digest.hexdigest()


def _same_json(payload: str, other: str) -> bool:
    """Two payloads of the same fields, references and meta, whatever the order of their keys. Python's ``==`` alone
    takes ``true`` for ``1`` and ``1`` for ``1.0``: values it finds equal are compared again as sorted JSON text."""
    value, other_value = json.loads(payload), json.loads(other)
    return value == other_value and json.dumps(value, sort_keys=True) == json.dumps(other_value, sort_keys=True)


class DatasetInfo(BaseModel):
    benchmark: str
    fingerprint: str  # the dataset version: source bytes + loader configuration (+ its reading, for a re-reading)
    source_sha256: str  # sha256 of the source file's bytes (several files: of their sorted hashes)
    registered_at: datetime
    n_instances: int
    skipped: dict[str, int]
    source_name: str
    # the keyed digest of the instances as read (``instances_digest``); None only in a store this release has not
    # yet opened for writing. Never listed: a digest of extract content.
    instances_sha256: str | None = Field(default=None, exclude=True)

    def read_with(self, loader_sha256: str) -> bool:
        """Whether this version is its source read with these loader settings (either fingerprint form)."""
        return self.fingerprint in (
            dataset_version(self.source_sha256, loader_sha256),
            *([dataset_version(self.source_sha256, loader_sha256, self.instances_sha256)]
              if self.instances_sha256 is not None else []))


class ReadingChange(BaseModel):
    """How the instances read now differ from those the same source and loader settings gave before (counts only,
    never content)."""

    previous: str  # the fingerprint of the version holding the earlier reading
    differing: int  # instances whose label, fields, references or meta differ, or that one reading lacks
    compared: int  # instances in either reading (by id)
    reordered: bool  # the instances both readings hold come in another order


class StoredVersion(BaseModel):
    fingerprint: str
    new: bool  # False: the same version was already stored (made current again)
    reading_changed: ReadingChange | None = None  # set where a new version is a new reading of the same source


class RunInfo(BaseModel):
    run_id: str
    model: str
    benchmarks: list[str]
    created_at: datetime
    finished_at: datetime | None
    status: str
    max_instances: int | None
    seed: int
    manifest: dict[str, Any]


class ResponseRow(BaseModel):
    benchmark: str
    instance_id: str
    output: str | None
    error: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    attempts: int


NEW_INSTANCES = ColumnBatch.of(instance_id="VARCHAR", position="INTEGER", label="VARCHAR", payload="VARCHAR")
INSTANCES_PER_BATCH = 5000
NEW_SCORES = ColumnBatch.of(benchmark="VARCHAR", instance_id="VARCHAR", metric="VARCHAR", value="DOUBLE",
                            details="VARCHAR")


def scores_batch(scores: Sequence[InstanceScore]) -> str:
    """Score rows bound as one parameter of ``NEW_SCORES.source``."""
    return NEW_SCORES.bind(
        benchmark=[s.benchmark for s in scores], instance_id=[s.instance_id for s in scores],
        metric=[s.metric for s in scores], value=[s.value for s in scores],
        details=[json.dumps(s.details) for s in scores])


class Store:
    """The store, opened by this process. A long-running writer (the runner) calls :meth:`release` whenever it
    is about to wait (for the network, for the next batch of outcomes): that gives the file lock back so
    read-only commands can open the store meanwhile, and the next query re-attaches it (waiting, bounded, for
    readers to finish). Nothing else changes for callers: ``conn`` is always usable."""

    def __init__(self, connect: Callable[[], EncryptedDatabase], path: Path) -> None:
        self._connect = connect
        self._db = connect()
        self.path = path

    @property
    def _conn(self) -> duckdb.DuckDBPyConnection:
        if not self._db.attached:
            self._db.attach(wait_s=max(REACQUIRE_WAIT_S, lock_timeout_s(self._db.settings)))
        return self._db.conn

    def probe(self) -> int:
        """A health check: read the store's ``meta`` table (the key opens the store, its schema is there); how
        many rows it has."""
        row = self._conn.execute("SELECT count(*) FROM meta").fetchone()
        return int(row[0]) if row else 0

    def release(self) -> None:
        """Give the store's file lock back until the next query (between transactions only)."""
        self._db.detach()

    @classmethod
    def open(cls, home: Home, *, read_only: bool = False, audit: AuditSink | None = None) -> Store:
        """Open the home's store. ``audit``: where a data-key rotation that crashed after its point of no
        return, finished here, is recorded (the caller's sink, bound to the appliance's system actor)."""
        from medhelm_local.store.rekey import recover_and_audit

        recover_and_audit(home.store_path, home.keys_dir, audit)
        return cls.open_file(home, home.store_path, read_only=read_only)

    @classmethod
    def open_file(cls, home: Home, path: Path, *, read_only: bool = False, migrate: bool = True) -> Store:
        """Open a store file with the home's data key and settings (the home's store, or a shard's store).

        A store another release migrated last (the first command after an upgrade or a rollback) is migrated
        before anything reads it, for a reader too: briefly opened for writing, waiting for the lock as a writer
        does, so that every query finds the tables and columns it expects. ``migrate=False`` (a health check,
        which never takes the write lock) reads the store as it is; see :meth:`schema_is_current`."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key, settings = load_data_key(home.keys_dir), home.config.store
        if read_only and not path.exists():
            cls.open_file(home, path).close()  # a reader on a fresh home: create the (empty) store first
        store = cls(lambda: open_database(path, key, read_only=read_only, settings=settings), path)
        if not read_only:
            store._migrate()
        elif migrate and not store.schema_is_current():
            store.close()
            try:
                cls.open_file(home, path).close()
            except StoreError as exc:
                raise StoreError(f"the store was last migrated by another release (before an upgrade or a rollback) "
                                 f"and is migrated once before it is read; that failed: {exc}") from None
            store = cls(lambda: open_database(path, key, read_only=True, settings=settings), path)
        return store

    def schema_is_current(self) -> bool:
        """Whether this code's migration is the last one the store went through."""
        return self._schema_digest() == schema_digest(schema_texts())

    def _migrate(self) -> None:
        # Each stage owns a ``schema_<stage>.sql`` file; all use CREATE ... IF NOT EXISTS. A store already migrated
        # by these very files (their digest in ``meta``) is left as it is: about 20 ms saved on every command.
        texts = schema_texts()
        digest = schema_digest(texts)
        if self._schema_digest() == digest:
            return
        with self.transaction():
            for _, text in texts:
                for statement in text.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
            self._conn.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING", [SCHEMA_VERSION]
            )
            self._unkey_requests()
            self._salt_dataset_digests()
            self._digest_datasets()
            self._conn.execute("INSERT INTO meta VALUES ('schema_digest', ?) ON CONFLICT (key) DO UPDATE SET "
                               "value = excluded.value", [digest])

    def _schema_digest(self) -> str | None:
        """The digest of the schema files this store was last migrated with (None: a new or older store)."""
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_digest'").fetchone()
        except duckdb.CatalogException:  # a new store: no meta table yet
            return None
        return str(row[0]) if row else None

    def _unkey_requests(self) -> None:
        """A store created with a primary key on ``requests`` gets the table rebuilt without it (see
        schema_core.sql), once, in the migration's transaction: all or nothing."""
        keyed = self._conn.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE database_name = current_database() "
            "AND table_name = 'requests' AND constraint_type = 'PRIMARY KEY'").fetchone()
        if not keyed or not keyed[0]:
            return
        self._conn.execute("CREATE TABLE requests_unkeyed (run_id VARCHAR NOT NULL, benchmark VARCHAR NOT NULL, "
                           "instance_id VARCHAR NOT NULL, request JSON, request_hash VARCHAR)")
        self._conn.execute("INSERT INTO requests_unkeyed SELECT run_id, benchmark, instance_id, request, "
                           "request_hash FROM requests")
        self._conn.execute("DROP TABLE requests")
        self._conn.execute("ALTER TABLE requests_unkeyed RENAME TO requests")

    def _salt_dataset_digests(self) -> None:
        """The store's random key for digests of instances, made once, before any is digested
        (``_digest_datasets``, next)."""
        if self._conn.execute("SELECT 1 FROM meta WHERE key = ?", [DIGEST_SALT_KEY]).fetchone():
            return
        self._conn.execute("INSERT INTO meta VALUES (?, ?)", [DIGEST_SALT_KEY, secrets.token_hex(32)])

    def _digest_salt(self) -> bytes:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", [DIGEST_SALT_KEY]).fetchone()
        if row is None:  # the migration makes it before anything is registered
            raise StoreError("the store has no key for digests of instances: open it for writing once to migrate it")
        return bytes.fromhex(str(row[0]))

    def published_fingerprint(self, fingerprint: str) -> str:
        """A dataset version's fingerprint as an export publishes it: keyed by the store's secret, so it names the
        same version across this appliance's exports but cannot be recomputed outside. The plain one is a sha256 of
        the source file's hash and the loader's: an insider who registered a file of known text but for one cell (a
        date of birth) could have it found by hashing guesses wherever the export goes."""
        return hmac.new(self._digest_salt(), f"published-dataset-version:{fingerprint}".encode(),
                        hashlib.sha256).hexdigest()

    def digest_instances(self, rows: Iterable[StoredInstance]) -> str:
        """``instances_digest`` with this store's key."""
        return instances_digest(rows, self._digest_salt())

    def _digest_datasets(self) -> None:
        """Dataset versions stored before ``instances_sha256`` existed get it, from their stored instances, so that
        registering their source again can tell whether this release reads it the same way."""
        for benchmark, fingerprint in self._conn.execute(
                "SELECT benchmark, fingerprint FROM datasets ANTI JOIN dataset_readings USING (benchmark, fingerprint)"
        ).fetchall():
            self._conn.execute(
                "INSERT INTO dataset_readings VALUES (?, ?, ?)",
                [benchmark, fingerprint, self.digest_instances(self._stored_instances(benchmark, fingerprint))])

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The raw connection, for stage modules that keep their own queries (``store/<stage>.py``)."""
        return self._conn

    def close(self) -> None:
        self._db.close()

    def reopen(self) -> None:
        """Close the database and open it again, handing back the memory DuckDB keeps after a large write.

        DuckDB keeps what a statement touched (table blocks, index nodes, allocator pages) until its memory
        limit; after planning a large run that is most of the runner's memory, and the send phase needs none
        of it.
        """
        self._db.close()
        self._db = self._connect()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    class _Transaction:
        def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
            self.conn = conn

        def __enter__(self) -> None:
            self.conn.execute("BEGIN TRANSACTION")

        def __exit__(
            self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
        ) -> None:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")

    def transaction(self) -> Store._Transaction:
        return Store._Transaction(self._conn)

    def checkpoint(self) -> None:
        self._conn.execute("CHECKPOINT")

    # -- datasets -----------------------------------------------------------------------------------------

    def register_dataset(
        self, benchmark: str, source_sha256: str, loader_sha256: str, source_name: str, instances: list[Instance],
        skipped: dict[str, int], *, before_commit: Callable[[], None] | None = None,
    ) -> StoredVersion:
        """Store a dataset version and make it the benchmark's current one.

        The same source and loader settings read into the same instances are the version already stored (made
        current again); read into other instances (this release's loader reads the file differently from the one
        that registered it), they are a new version, whose fingerprint covers the reading.
        ``before_commit`` runs inside the transaction, last: if it raises, nothing is stored.
        """
        rows = [stored_form(instance) for instance in instances]
        digest = self.digest_instances(rows)
        now = utcnow()
        with self.transaction():
            earlier = self._readings(benchmark, source_sha256, loader_sha256)
            kept = next((fingerprint for fingerprint, stored in earlier if stored == digest), None)
            change = None
            if kept is None and earlier:
                change = self._reading_change(benchmark, earlier[0][0], rows)
                if change is None:  # the same instances, only serialized otherwise (the order of a payload's keys)
                    kept = earlier[0][0]
            if kept is not None:
                fingerprint = kept
                self._conn.execute(
                    "UPDATE datasets SET registered_at = ? WHERE benchmark = ? AND fingerprint = ?",
                    [now, benchmark, fingerprint],
                )
            else:
                fingerprint = dataset_version(source_sha256, loader_sha256, digest if earlier else None)
                self._conn.execute(
                    "INSERT INTO datasets VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [benchmark, fingerprint, source_sha256, now, len(rows), json.dumps(skipped), source_name],
                )
                self._conn.execute("INSERT INTO dataset_readings VALUES (?, ?, ?)", [benchmark, fingerprint, digest])
                self._insert_instances(benchmark, fingerprint, rows)
            if before_commit is not None:
                before_commit()
        return StoredVersion(fingerprint=fingerprint, new=kept is None, reading_changed=change)

    def _readings(self, benchmark: str, source_sha256: str, loader_sha256: str) -> list[tuple[str, str | None]]:
        """The versions these source bytes read with these loader settings gave, newest first: (fingerprint,
        instances_sha256)."""
        rows = self._conn.execute(
            f"SELECT fingerprint, instances_sha256 FROM {DATASETS_READ} WHERE benchmark = ? AND source_sha256 = ? "
            "ORDER BY registered_at DESC", [benchmark, source_sha256]).fetchall()
        first = dataset_version(source_sha256, loader_sha256)
        return [(fingerprint, stored) for fingerprint, stored in rows
                if fingerprint == first
                or (stored is not None and fingerprint == dataset_version(source_sha256, loader_sha256, stored))]

    def _reading_change(self, benchmark: str, previous: str, rows: list[StoredInstance]) -> ReadingChange | None:
        """How ``rows`` differ from version ``previous``'s instances (None: not at all). The stored instances are
        streamed, each compared with the one read now of its id: by its text, then, where that differs, as JSON
        (the same values serialized with their keys in another order are the same instance)."""
        now = {instance_id: (label, payload) for instance_id, label, payload in rows}
        kept: list[str] = []  # the ids read before and now, in the earlier order
        differing = before = 0
        for instance_id, label, payload in self._stored_instances(benchmark, previous):
            before += 1
            read = now.get(instance_id)
            if read is None:
                differing += 1
                continue
            kept.append(instance_id)
            if read[0] != label or (read[1] != payload and not _same_json(read[1], payload)):
                differing += 1
        common = set(kept)
        differing += len(now) - len(kept)  # read now only
        reordered = kept != [instance_id for instance_id in now if instance_id in common]
        if not differing and not reordered:
            return None
        return ReadingChange(previous=previous, differing=differing, compared=before + len(now) - len(kept),
                             reordered=reordered)

    def _stored_instances(self, benchmark: str, fingerprint: str, *, chunk: int = INSTANCES_PER_BATCH
                          ) -> Iterator[StoredInstance]:
        """A version's instances as stored, in order, ``chunk`` at a time (on this connection, so inside a
        transaction too)."""
        after = -1
        while rows := self._conn.execute(
                "SELECT instance_id, label, payload, position FROM instances WHERE benchmark = ? AND fingerprint = ? "
                "AND position > ? ORDER BY position LIMIT ?", [benchmark, fingerprint, after, chunk]).fetchall():
            yield from ((instance_id, label, payload) for instance_id, label, payload, _ in rows)
            after = rows[-1][3]

    def _insert_instances(self, benchmark: str, fingerprint: str, rows: list[StoredInstance]) -> None:
        for start in range(0, len(rows), INSTANCES_PER_BATCH):
            chunk = rows[start:start + INSTANCES_PER_BATCH]
            batch = NEW_INSTANCES.bind(
                instance_id=[row[0] for row in chunk], position=list(range(start, start + len(chunk))),
                label=[row[1] for row in chunk], payload=[row[2] for row in chunk])
            self._conn.execute(f"INSERT INTO instances SELECT $benchmark, $fingerprint, * FROM {NEW_INSTANCES.source}",
                               {"benchmark": benchmark, "fingerprint": fingerprint, "batch": batch})

    def _dataset(self, row: tuple[Any, ...]) -> DatasetInfo:
        return DatasetInfo(
            benchmark=row[0], fingerprint=row[1], source_sha256=row[2], registered_at=row[3], n_instances=row[4],
            skipped=json.loads(row[5]), source_name=row[6], instances_sha256=row[7],
        )

    def current_dataset(self, benchmark: str) -> DatasetInfo | None:
        row = self._conn.execute(
            f"SELECT * FROM {DATASETS_READ} WHERE benchmark = ? ORDER BY registered_at DESC LIMIT 1", [benchmark]
        ).fetchone()
        return self._dataset(row) if row else None

    def list_datasets(self) -> list[DatasetInfo]:
        rows = self._conn.execute(f"SELECT * FROM {DATASETS_READ} ORDER BY benchmark, registered_at DESC").fetchall()
        return [self._dataset(r) for r in rows]

    def instance_labels(self, benchmark: str, fingerprint: str) -> list[tuple[str, str | None]]:
        return [
            (r[0], r[1])
            for r in self._conn.execute(
                "SELECT instance_id, label FROM instances WHERE benchmark = ? AND fingerprint = ? "
                "ORDER BY position",
                [benchmark, fingerprint],
            ).fetchall()
        ]

    def iter_instances(self, benchmark: str, fingerprint: str, *, chunk: int) -> Iterator[list[Instance]]:
        """A dataset version's instances in dataset order, ``chunk`` at a time (one position range per query)."""
        start = 0
        while True:
            rows = self._conn.execute(
                "SELECT instance_id, label, payload FROM instances WHERE benchmark = ? AND fingerprint = ? "
                "AND position >= ? AND position < ? ORDER BY position",
                [benchmark, fingerprint, start, start + chunk],
            ).fetchall()
            if not rows:
                return
            yield [self._instance(benchmark, *row) for row in rows]
            start += chunk

    @staticmethod
    def _instance(benchmark: str, instance_id: str, label: str | None, payload: str) -> Instance:
        return Instance(benchmark=benchmark, id=instance_id, label=label, **json.loads(payload))

    def get_instances(self, benchmark: str, fingerprint: str, ids: Iterable[str]) -> dict[str, Instance]:
        wanted = list(ids)
        if not wanted:
            return {}
        rows = self._conn.execute(
            "SELECT instance_id, label, payload FROM instances "
            f"WHERE benchmark = ? AND fingerprint = ? AND instance_id IN {ID_LIST_PARAM}",
            [benchmark, fingerprint, id_list(wanted)],
        ).fetchall()
        return {row[0]: self._instance(benchmark, *row) for row in rows}

    # -- runs ---------------------------------------------------------------------------------------------

    def _run(self, row: tuple[Any, ...]) -> RunInfo:
        return RunInfo(
            run_id=row[0], model=row[1], benchmarks=json.loads(row[2]), created_at=row[3], finished_at=row[4],
            status=row[5], max_instances=row[6], seed=row[7], manifest=json.loads(row[8]),
        )

    def get_run(self, run_id: str) -> RunInfo | None:
        row = self._conn.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).fetchone()
        return self._run(row) if row else None

    def list_runs(self) -> list[RunInfo]:
        return [self._run(r) for r in self._conn.execute("SELECT * FROM runs ORDER BY created_at, run_id").fetchall()]

    def set_run_status(self, run_id: str, status: str, *, finished: bool = False) -> None:
        self._conn.execute(
            "UPDATE runs SET status = ?, finished_at = ? WHERE run_id = ?",
            [status, utcnow() if finished else None, run_id],
        )

    def run_item_fingerprints(self, run_id: str, benchmark: str) -> list[tuple[str, str]]:
        return [
            (r[0], r[1])
            for r in self._conn.execute(
                "SELECT instance_id, fingerprint FROM run_items WHERE run_id = ? AND benchmark = ?",
                [run_id, benchmark],
            ).fetchall()
        ]

    def run_dataset_versions(self, run_id: str, benchmark: str) -> frozenset[str]:
        """The dataset versions (fingerprints) a run planned its items of ``benchmark`` from."""
        return frozenset(
            r[0]
            for r in self._conn.execute(
                "SELECT DISTINCT fingerprint FROM run_items WHERE run_id = ? AND benchmark = ?", [run_id, benchmark]
            ).fetchall()
        )

    def count_items(self, run_id: str, benchmark: str) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM run_items WHERE run_id = ? AND benchmark = ?", [run_id, benchmark]
        ).fetchone()
        return int(row[0]) if row else 0

    def responses(self, run_id: str, benchmark: str) -> Iterator[ResponseRow]:
        cursor = self._conn.cursor()  # a cursor starts in the default catalog
        cursor.execute(f"USE {STORE_ALIAS}")
        cursor.execute(
            "SELECT r.instance_id, r.output, r.error, r.prompt_tokens, r.completion_tokens, r.latency_s, "
            "r.attempts FROM responses r JOIN run_items i USING (run_id, benchmark, instance_id) "
            "WHERE r.run_id = ? AND r.benchmark = ? ORDER BY i.position",
            [run_id, benchmark],
        )
        while batch := cursor.fetchmany(1000):
            for row in batch:
                yield ResponseRow(
                    benchmark=benchmark, instance_id=row[0], output=row[1], error=row[2], prompt_tokens=row[3],
                    completion_tokens=row[4], latency_s=row[5], attempts=row[6],
                )
        cursor.close()

    def replace_scores(self, run_id: str, benchmark: str, scores: list[InstanceScore]) -> None:
        """Scores are derived data: re-scoring replaces a benchmark's scores for the run in one transaction."""
        with self.transaction():
            self._conn.execute("DELETE FROM scores WHERE run_id = ? AND benchmark = ?", [run_id, benchmark])
            # One statement per batch, not executemany: DuckDB's Python client binds that row by row, value by
            # value (issue 14's profile of a 3,320-item run: 5.9 s in it, mostly failed module imports per value).
            for start in range(0, len(scores), INSTANCES_PER_BATCH):
                chunk = scores[start:start + INSTANCES_PER_BATCH]
                self._conn.execute(f"INSERT INTO scores SELECT $run_id, * FROM {NEW_SCORES.source}",
                                   {"run_id": run_id, "batch": scores_batch(chunk)})
