#!/usr/bin/env bash
# Regenerates docs/apis.md from the API table (the binary's --list-apis).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/cudatrace}
{
  echo "# Traced APIs"
  echo
  echo "Generated from the API table in \`src/decode/api_table.cpp\` by \`scripts/gen-docs.sh\`"
  echo "(\`cudatrace --list-apis\`); a test fails when this file is out of date."
  echo "Select groups with \`-f\` and layers with \`--layer\`; without \`-f\`, the groups marked"
  echo "\"traced by default\" in the table at the end are traced."
  echo "The nvtx rows are the probe targets of cudatrace's NVTX injection library, traced with \`--nvtx\` (docs/nvtx.md)."
  echo
  "$bin" -f all --nvtx --list-apis
} > docs/apis.md
