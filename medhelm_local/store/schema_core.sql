CREATE TABLE IF NOT EXISTS meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR
);
-- ``fingerprint`` identifies a dataset version: the source bytes (``source_sha256``) read under one loader
-- configuration. Re-reading the same bytes with a changed mapping is a new version, so old runs keep theirs.
CREATE TABLE IF NOT EXISTS datasets (
    benchmark VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    source_sha256 VARCHAR NOT NULL,
    registered_at TIMESTAMP NOT NULL,
    n_instances INTEGER NOT NULL,
    skipped JSON NOT NULL,
    source_name VARCHAR NOT NULL,
    PRIMARY KEY (benchmark, fingerprint)
);
-- A version's instances as read (store.py ``instances_digest``, keyed by the store's random salt in ``meta``: no
-- digest of extract values anyone can compute): the same bytes and mapping read into other
-- instances by a later release are a new version too, its fingerprint covering the reading. A table of its own,
-- not a column of ``datasets``: the previous release inserts datasets by position, and must still after a
-- rollback. Versions it registers then have no row here until the next migration (step ``digest_datasets``).
CREATE TABLE IF NOT EXISTS dataset_readings (
    benchmark VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    instances_sha256 VARCHAR NOT NULL,
    PRIMARY KEY (benchmark, fingerprint)
);
CREATE TABLE IF NOT EXISTS instances (
    benchmark VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    position INTEGER NOT NULL,
    label VARCHAR,
    payload JSON NOT NULL,
    PRIMARY KEY (benchmark, fingerprint, instance_id)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    model VARCHAR NOT NULL,
    benchmarks JSON NOT NULL,
    created_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    status VARCHAR NOT NULL,
    max_instances INTEGER,
    seed INTEGER NOT NULL,
    manifest JSON NOT NULL
);
-- The planned work of a run: which instances of which dataset version it evaluates.
CREATE TABLE IF NOT EXISTS run_items (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id)
);
-- The request each outcome was sent with, as its SHA-256 (``request_hash``), written in the outcome's transaction
-- and only for an item without a stored outcome (store/runs.py): one per item, kept by ``responses``' key. The
-- prompt itself is not stored again (it would be a copy of the instance's text per run): the console rebuilds it
-- from the run's frozen spec, the instance and its recorded cut, and checks it against the hash. ``request`` holds
-- the JSON of requests stored before (about 3 KB each), NULL for new ones. No primary key: with an index on those
-- wide rows, every checkpoint (one per commit round while a run sends) cost time growing with the table (1.5 s at
-- 100,000 requests against 0.03 s without, bench/checkpoint_cost.py). Stores created with the key lose it when
-- opened for writing (store/store.py ``_unkey_requests``).
CREATE TABLE IF NOT EXISTS requests (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    request JSON,
    request_hash VARCHAR
);
-- Stores created before had both columns NOT NULL: lifted here (catalog changes, no rewrite).
ALTER TABLE requests ALTER COLUMN request DROP NOT NULL;
ALTER TABLE requests ALTER COLUMN request_hash DROP NOT NULL;
-- One row per run item at most: a response or a recorded error, never both, never two.
CREATE TABLE IF NOT EXISTS responses (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    output VARCHAR,
    error VARCHAR,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s DOUBLE NOT NULL,
    attempts INTEGER NOT NULL,
    finish_reason VARCHAR,
    endpoint VARCHAR,
    completed_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id)
);
CREATE TABLE IF NOT EXISTS scores (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE,
    details JSON NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id, metric)
);
