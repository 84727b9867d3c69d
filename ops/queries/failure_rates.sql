-- Finished batch jobs per UTC day and outcome: 'completed' or the job error code, with the
-- share of that day's finished jobs. Deleted transcripts are no longer in the table (their
-- rows are tombstones); usage_events keeps completed/failed counts for those.
-- Parameters: {from:DateTime64(3)}, {to:DateTime64(3)}.
SELECT
    day,
    outcome,
    jobs,
    round(jobs / sum(jobs) OVER (PARTITION BY day), 4) AS share
FROM
(
    SELECT
        toDate(completed_at) AS day,
        if(status = 'completed', 'completed', ifNull(error_code, 'internal_error')) AS outcome,
        count() AS jobs
    FROM {db}.transcripts FINAL
    WHERE deleted = 0 AND status IN ('completed', 'error')
      AND completed_at >= {from:DateTime64(3)} AND completed_at < {to:DateTime64(3)}
    GROUP BY day, outcome
)
ORDER BY day, jobs DESC, outcome
