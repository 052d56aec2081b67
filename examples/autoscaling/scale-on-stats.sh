#!/bin/sh
# Print the number of workers a queue needs, from `pullqueue stats --json` (Cloud Monitoring).
# Usage: scale-on-stats.sh QUEUE PROJECT [TASKS_PER_WORKER] [MAX_WORKERS]
# Prints nothing and exits 3 when the backlog is unknown (Monitoring unreadable or no sample):
# keep the current scale then, never scale to zero on an unknown.
set -eu
queue=$1 project=$2 per_worker=${3:-1000} max=${4:-20}
stats=$(pullqueue stats "$queue" --url "pubsub://$project" --json)
backlog=$(printf '%s' "$stats" | jq -r '.monitoring.undelivered // "unknown"')
if [ "$backlog" = unknown ]; then
  printf '%s\n' "$stats" | jq -r '"backlog unknown: " + (.monitoring.reason // "no sample")' >&2
  exit 3
fi
workers=$(( (backlog + per_worker - 1) / per_worker ))
[ "$workers" -gt "$max" ] && workers=$max
echo "$workers"
