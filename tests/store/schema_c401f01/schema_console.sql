-- The web console (issue 17): clinicians' blinded ratings of sampled open-ended responses on the jury's own
-- criteria (1-5), one row per (item, clinician). Ratings are numbers only, read by `jury validate`.
CREATE TABLE IF NOT EXISTS clinician_ratings (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    instance_id VARCHAR NOT NULL,
    rater VARCHAR NOT NULL,
    ratings JSON NOT NULL,
    rated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, benchmark, instance_id, rater)
);
