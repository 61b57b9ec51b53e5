#!/bin/sh
# A command for `emq work`: counts the words of a job whose payload is a JSON string.
#
#   emq enqueue texts '"the quick brown fox"'
#   emq work texts --concurrency 4 -- examples/emq-work-wordcount.sh
#
# emq work writes the payload (JSON) to stdin and sets EMQ_JOB_ID, EMQ_ATTEMPT, EMQ_FENCE and
# EMQ_QUEUE. What this prints on stdout becomes the job's result (JSON if it parses); a
# non-zero exit fails the attempt, with the end of stderr as the error.
set -eu

payload=$(cat)
echo "wordcount: job $EMQ_JOB_ID of $EMQ_QUEUE, attempt $EMQ_ATTEMPT, fence $EMQ_FENCE" >&2

case $payload in
  \"*\") text=${payload#\"}; text=${text%\"} ;;
  *) echo "wordcount: the payload must be a JSON string, got: $payload" >&2; exit 65 ;;
esac

words=$(printf '%s' "$text" | wc -w | tr -d ' ')
printf '{"words": %s, "job": "%s", "attempt": %s}\n' "$words" "$EMQ_JOB_ID" "$EMQ_ATTEMPT"
