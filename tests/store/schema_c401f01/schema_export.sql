-- What approved exports released, per cell (model x benchmark x run): each instance that a published number
-- covered, as sha256(sha256(instance id) || sha256(payload)), so a later export whose cell differs from a released one by
-- 1 to min_cell_size - 1 instances (differencing: add one patient, re-export) is refused.
CREATE TABLE IF NOT EXISTS export_released_cells (
    request_id VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    instance_key VARCHAR NOT NULL,
    released_at TIMESTAMP NOT NULL
)
