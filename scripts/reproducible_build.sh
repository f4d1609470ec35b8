#!/usr/bin/env bash
# Build the distributions twice from this checkout and require byte-identical files.
#
#   scripts/reproducible_build.sh OUTDIR [python -m build's options, e.g. --wheel]
#
# SOURCE_DATE_EPOCH is the time of the checked-out commit unless it is set already (setup.py's
# docstring says how each file honours it). The first build is left in OUTDIR; the second, in a
# temporary folder, is compared with it by sha256 and removed. PYTHON names the interpreter that
# runs `python -m build` (default: python). Exit status 1, with the differing digests, when the
# builds differ.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [python -m build options]" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
shift
[ -z "$(ls -A "$out")" ] || { echo "$0: $out is not empty" >&2; exit 2; }
cd "$(dirname "$0")/.."
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
python=${PYTHON:-python}
again=$(mktemp -d)
trap 'rm -rf "$again"' EXIT

"$python" -m build --outdir "$out" "$@" .
"$python" -m build --quiet --outdir "$again" "$@" .  # its log is the first one's
digests() { (cd "$1" && sha256sum -- *); }
if ! diff <(digests "$out") <(digests "$again") >&2; then
    echo "$0: two builds of one commit differ (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)" >&2
    exit 1
fi
echo "reproducible (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH):"
digests "$out"
