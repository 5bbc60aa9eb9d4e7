-- The runner's own tables (issue 4). Core tables (runs, run_items, requests, responses) are not altered here.
-- How a run was planned: the key that lets the same command find and resume it, and the send order.
CREATE TABLE IF NOT EXISTS runner_runs (
    run_id VARCHAR PRIMARY KEY,
    plan_key VARCHAR NOT NULL,
    order_mode VARCHAR NOT NULL,
    manifest_sha256 VARCHAR NOT NULL
);
-- Send order of a run's items (prefix-grouped, plan order or shuffled), fixed at planning time.
CREATE TABLE IF NOT EXISTS runner_item_order (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    send_rank BIGINT NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id)
);
-- One row per execution session (start, resume, retry of errors, one shard). Counters are updated with every
-- group commit, so a killed session still reports the time and tokens it measured up to its last commit.
CREATE TABLE IF NOT EXISTS runner_sessions (
    run_id VARCHAR NOT NULL,
    session_id VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    shard VARCHAR,
    started_at TIMESTAMP NOT NULL,
    last_commit_at TIMESTAMP,
    wall_s DOUBLE NOT NULL,
    responses BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    request_s DOUBLE NOT NULL,
    endpoints JSON NOT NULL,
    PRIMARY KEY (run_id, session_id)
);
-- Error rows replaced by `run --retry-errors`: the failure stays on record (category only, never a body).
CREATE TABLE IF NOT EXISTS runner_error_history (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    error VARCHAR NOT NULL,
    attempts INTEGER NOT NULL,
    endpoint VARCHAR,
    replaced_at TIMESTAMP NOT NULL
);
-- Prompts cut to fit the model's context (issue 14 §3): which field, by how much (counts only, never text).
CREATE TABLE IF NOT EXISTS runner_truncations (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    field VARCHAR NOT NULL,
    field_chars INTEGER NOT NULL,
    removed_chars INTEGER NOT NULL,
    removed_tokens INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id)
);
-- sha256 of local weight files, computed once per (path, size, mtime).
CREATE TABLE IF NOT EXISTS weight_hashes (
    path VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    sha256 VARCHAR NOT NULL,
    hashed_at TIMESTAMP NOT NULL,
    PRIMARY KEY (path, size, mtime_ns)
);
-- Model servers started by `serve vllm`: what they reported (/version, /v1/models), never a prompt.
CREATE TABLE IF NOT EXISTS model_servers (
    server_id VARCHAR PRIMARY KEY,
    model VARCHAR NOT NULL,
    base_url VARCHAR NOT NULL,
    started_at TIMESTAMP NOT NULL,
    server_version VARCHAR,
    served_models JSON NOT NULL,
    command_sha256 VARCHAR NOT NULL
);
-- Send-order keys (runner/plan.py: prefix_key) of a dataset version's prompts under one prompt template,
-- computed when the dataset is registered, so planning a run reads them instead of building every prompt
-- again. Chained hashes of 256-character blocks of the prompt, kept in the encrypted store with the instances
-- they come from. A set is complete (one row per instance) or absent: it is written in one transaction.
CREATE TABLE IF NOT EXISTS prefix_keys (
    benchmark VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    template_sha256 VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    prefix_key VARCHAR NOT NULL
);
