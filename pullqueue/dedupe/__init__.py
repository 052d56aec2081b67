"""Task-name registries that give Pub/Sub the legacy queue's named-task deduplication.

A registry claims a name before its task is published and tombstones it on delete, so
`TaskAlreadyExistsError` and `TombstonedTaskError` mean on Pub/Sub what they meant before.
"""
