#!/usr/bin/env bash
# Runs the README's walk-through (the block under "## Walk-through", exactly as written) against a
# running service, and fails if any call got no answer or an HTTP error that the block does not
# announce (a comment line starting with the status, e.g. "# 409 not_delayed").
# Usage: examples/walkthrough.sh [BASE_URL [README]]   (needs bash, curl and python3)
# BASE_URL defaults to $EMQ_URL, else http://localhost:8080; it replaces the block's localhost:8080.
set -uo pipefail
base=${1:-${EMQ_URL:-http://localhost:8080}}
readme=${2:-$(dirname "$0")/../README.md}

# The first ```sh block after the heading.
block=$(python3 - "$readme" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
section = text.split("\n## Walk-through\n", 1)[1]
print(re.search(r"^```sh\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)[1], end="")
PY
) || exit 2

calls=$(mktemp)
last_call=$(mktemp)
trap 'rm -f "$calls" "$last_call"' EXIT

# The block's curl, aimed at BASE_URL, noting each call's status (-w writes it to stderr, kept
# apart from the answer, which the block may read). Exit 28 is --max-time ending an event stream.
curl() {
  local args=() arg status=0
  for arg in "$@"; do args+=("${arg//localhost:8080/$base}"); done
  command curl -w '%{stderr}%{http_code} %{method} %{url_effective}\n' "${args[@]}" 2>"$last_call" || status=$?
  tail -n 1 "$last_call" >>"$calls"
  echo  # the answers end without a newline: one line each
  ((status == 0 || status == 28))
}

eval "$block"

announced=$(grep -oE '^[[:space:]]*#[[:space:]]*[45][0-9]{2}\b' <<<"$block" | grep -oE '[0-9]{3}' | sort -u)
failed=0
while read -r code method url; do
  if [[ $code == 000 ]] || { ((code >= 400)) && ! grep -qx "$code" <<<"$announced"; }; then
    echo "walk-through: $method $url answered $code, which the README does not announce" >&2
    failed=1
  fi
done <"$calls"
echo "# walk-through: $(wc -l <"$calls") calls"
exit "$failed"
