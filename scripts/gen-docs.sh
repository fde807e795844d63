#!/usr/bin/env bash
# Regenerates docs/apis.md from the API table (the binary's --list-apis).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/cudatrace}
{
  echo "# Traced APIs"
  echo
  echo "Generated from the API table in \`src/api_table.cpp\` by \`scripts/gen-docs.sh\`"
  echo "(\`cudatrace --list-apis\`); a test fails when this file is out of date."
  echo "Select groups with \`-f\` and layers with \`--layer\`."
  echo
  "$bin" -f mem,xfer,launch,stream,event,device,module,coll --list-apis
} > docs/apis.md
