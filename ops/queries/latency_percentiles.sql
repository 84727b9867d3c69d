-- Latency percentiles (seconds) of completed batch jobs per UTC day:
--   queue_wait  = started_at - created_at   (waiting for one of the account's slots)
--   processing  = completed_at - started_at (decode, VAD, ASR, diarization, bookkeeping)
--   total       = completed_at - created_at (what a client waits)
--   rtf         = processing / audio_duration (real-time factor; below 1 is faster than real time)
-- Parameters: {from:DateTime64(3)}, {to:DateTime64(3)}.
SELECT
    day,
    count() AS jobs,
    round(quantileExact(0.5)(queue_wait), 3) AS queue_wait_p50,
    round(quantileExact(0.9)(queue_wait), 3) AS queue_wait_p90,
    round(quantileExact(0.5)(processing), 3) AS processing_p50,
    round(quantileExact(0.9)(processing), 3) AS processing_p90,
    round(quantileExact(0.99)(processing), 3) AS processing_p99,
    round(quantileExact(0.5)(total), 3) AS total_p50,
    round(quantileExact(0.9)(total), 3) AS total_p90,
    round(quantileExact(0.99)(total), 3) AS total_p99,
    round(quantileExact(0.5)(rtf), 3) AS rtf_p50,
    round(quantileExact(0.9)(rtf), 3) AS rtf_p90
FROM
(
    SELECT
        toDate(completed_at) AS day,
        dateDiff('millisecond', created_at, assumeNotNull(started_at)) / 1000 AS queue_wait,
        dateDiff('millisecond', assumeNotNull(started_at), assumeNotNull(completed_at)) / 1000
            AS processing,
        dateDiff('millisecond', created_at, assumeNotNull(completed_at)) / 1000 AS total,
        processing / greatest(ifNull(audio_duration, 0), 0.001) AS rtf
    FROM {db}.transcripts FINAL
    WHERE deleted = 0 AND status = 'completed'
      AND started_at IS NOT NULL AND completed_at IS NOT NULL
      AND completed_at >= {from:DateTime64(3)} AND completed_at < {to:DateTime64(3)}
)
GROUP BY day
ORDER BY day
