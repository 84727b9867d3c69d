-- Queue wait per hour of creation: how long jobs waited for a processing slot (seconds),
-- and how many jobs are still waiting or running from that hour. A running job's row stays
-- 'queued' here until its outcome (the 'processing' state lives in the API's read model,
-- docs/job-path.md): still_queued counts both, still_processing only the rare rows written
-- while that model had no entry; wait_* come from the finished rows' started_at.
-- Parameters: {from:DateTime64(3)}, {to:DateTime64(3)}.
SELECT
    toStartOfHour(created_at) AS hour,
    count() AS jobs,
    countIf(status = 'queued') AS still_queued,
    countIf(status = 'processing') AS still_processing,
    round(avgIf(dateDiff('millisecond', created_at, assumeNotNull(started_at)) / 1000,
                started_at IS NOT NULL), 3) AS wait_avg,
    round(quantileExactIf(0.9)(dateDiff('millisecond', created_at, assumeNotNull(started_at)) / 1000,
                               started_at IS NOT NULL), 3) AS wait_p90,
    round(maxIf(dateDiff('millisecond', created_at, assumeNotNull(started_at)) / 1000,
                started_at IS NOT NULL), 3) AS wait_max
FROM {db}.transcripts FINAL
WHERE deleted = 0 AND created_at >= {from:DateTime64(3)} AND created_at < {to:DateTime64(3)}
GROUP BY hour
ORDER BY hour
