-- The scoring stage: one row per (run or predictions file, benchmark, instance, judge) LLM-jury judgement.
-- A failed or invalid judgement is kept with its error category, never replaced by a rating.
-- Explanations are model text about patient data: they live here, in the encrypted store, and nowhere else.
CREATE TABLE IF NOT EXISTS judgments (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    judge VARCHAR NOT NULL,
    prompt_hash VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    error VARCHAR,
    ratings JSON,
    explanations JSON,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s DOUBLE NOT NULL,
    attempts INTEGER NOT NULL,
    judged_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id, judge)
);
-- The structured-output shape the judge was sent: json_schema, json_object+schema or prompt_only (issue 18).
ALTER TABLE judgments ADD COLUMN IF NOT EXISTS output_shape VARCHAR;
-- What was cut from the judge prompt to fit the judge's context: counts per field, never text (issue 18).
ALTER TABLE judgments ADD COLUMN IF NOT EXISTS truncation JSON;
