#!/usr/bin/env bash
# The README's walk-through: enqueue -> lease -> heartbeat -> ack, then a schedule, against a
# running service.
# Usage: examples/walkthrough.sh [BASE_URL] [QUEUE]   (needs curl and python3)
set -euo pipefail
base=${1:-${EMQ_URL:-http://127.0.0.1:8080}}
queue=${2:-walkthrough}

post() { curl -sS --fail-with-body -H 'content-type: application/json' -d "$2" "$base$1"; echo; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "# enqueue"
post "/v1/queues/$queue/jobs" '{"payload": {"to": "ada@example.com"}, "max_attempts": 5}'

echo "# lease (long poll up to 5 s)"
leased=$(post "/v1/queues/$queue/lease" '{"worker": "w1", "lease_ms": 30000, "wait_ms": 5000}')
echo "$leased"
id=$(echo "$leased" | field '["jobs"][0]["id"]')
lease_id=$(echo "$leased" | field '["jobs"][0]["lease_id"]')

echo "# the ledger: who holds what"
curl -sS --fail-with-body "$base/v1/queues/$queue/active"; echo

echo "# heartbeat"
post "/v1/queues/$queue/jobs/$id/heartbeat" "{\"lease_id\": \"$lease_id\"}"

echo "# ack"
post "/v1/queues/$queue/jobs/$id/ack" "{\"lease_id\": \"$lease_id\", \"result\": {\"sent\": true}}"

echo "# a schedule: one job a minute (PUT again any time: runs and next run are kept)"
curl -sS --fail-with-body -X PUT -H 'content-type: application/json' \
  -d '{"every_ms": 60000, "job": {"payload": {"kind": "digest"}}}' "$base/v1/queues/$queue/schedules/digest"; echo
echo "# trigger it: one job now"
curl -sS --fail-with-body -X POST "$base/v1/queues/$queue/schedules/digest/trigger"; echo
curl -sS --fail-with-body -X DELETE "$base/v1/queues/$queue/schedules/digest"

echo "# the queue"
curl -sS --fail-with-body "$base/v1/queues/$queue"; echo

