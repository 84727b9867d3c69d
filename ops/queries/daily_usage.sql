-- Daily usage by account, API key and model (UTC days), from the usage ledger.
-- requests: accepted creates plus live sessions; completed/failed: finished jobs (a live
-- session counts as completed); audio_seconds: what was counted toward usage.
-- Parameters: {from:DateTime64(3)}, {to:DateTime64(3)}.
SELECT
    toDate(at) AS day,
    account_id,
    key_id,
    model,
    countIf(kind IN ('request', 'stream')) AS requests,
    countIf(kind IN ('completed', 'stream')) AS completed,
    countIf(kind = 'failed') AS failed,
    round(sum(audio_seconds), 3) AS audio_seconds
FROM {db}.usage_events FINAL
WHERE at >= {from:DateTime64(3)} AND at < {to:DateTime64(3)}
GROUP BY day, account_id, key_id, model
ORDER BY day, account_id, key_id, model
