#!/usr/bin/env bash
# Regenerates docs/apis.md and the table of API groups in docs/guide.md from
# the API table (the binary's --list-apis). Trace.ListApisMatchesTheDocs checks both.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/cudatrace}
listing=$("$bin" -f all --nvtx --list-apis)
{
  echo "# Traced APIs"
  echo
  echo "Generated from the API table by \`scripts/gen-docs.sh\` (\`cudatrace --list-apis\`); a test fails when this"
  echo "file is out of date. The table has a row for every function the CUDA toolkit's \`cuda.h\`,"
  echo "\`cuda_runtime_api.h\` and interoperability headers declare, generated at build time from the headers"
  echo "(\`scripts/gen-api-rows.py\`), with the groups, effects and hand-written rows of"
  echo "\`src/decode/api_overrides.cpp\` on top."
  echo "Select groups with \`-f\` and layers with \`--layer\`; without \`-f\`, the groups marked"
  echo "\"traced by default\" in the table at the end are traced."
  echo "The nvtx rows are NVTX's range calls, each probed at a function of cudatrace's NVTX injection library, traced"
  echo "with \`--nvtx\` (docs/nvtx.md)."
  echo "An argument \"not read\" is shown as \`?\` (\`null\` in JSON): a float or double (passed in an xmm register),"
  echo "a struct passed by value, or an argument beyond the 11 saved argument slots."
  echo
  printf '%s\n' "$listing"
} > docs/apis.md
# The guide's copy of the group table, between its markers (read from
# docs/apis.md: the listing is too long to pass as an argument).
python3 - <<'PY'
import re
groups = re.search(r"^\| group \|.*?(?=\n\n)", open("docs/apis.md", encoding="utf-8").read(), re.S | re.M).group(0)
guide = open("docs/guide.md", encoding="utf-8").read()
start, end = "<!-- api-groups: scripts/gen-docs.sh writes this table from the API table -->\n", "<!-- /api-groups -->"
before, rest = guide.split(start)
_, after = rest.split(end)
open("docs/guide.md", "w", encoding="utf-8").write(before + start + groups + "\n" + end + after)
PY
