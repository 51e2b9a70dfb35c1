"""The cloud instance agent (``job.pyz agent``) and the buckets it and the launching side use."""
