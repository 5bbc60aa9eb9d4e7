#!/bin/sh
# Verify a model's weights against a sha256sum manifest before vLLM may load them.
# Exit 0 only if: the manifest exists and is well formed, every listed file exists and matches its hash,
# and no file in the weights directory is missing from the manifest (nothing unlisted can be loaded).
# Env: WEIGHTS_DIR (the weights directory), WEIGHTS_MANIFEST (the manifest file, `sha256sum` format: inside
# the weights directory, or elsewhere, e.g. a trusted copy mounted from the chart's values), and optionally
# WEIGHTS_DIR_MANIFEST (default SHA256SUMS): the name, relative to WEIGHTS_DIR, of the manifest kept beside
# the weights (deploy/AIRGAP.md writes one there). That one file is not a weight: it is not required to be
# listed, is never loaded by vLLM, and is ignored when the trusted manifest comes from elsewhere.
set -eu

dir="${WEIGHTS_DIR:?WEIGHTS_DIR is not set}"
manifest="${WEIGHTS_MANIFEST:?WEIGHTS_MANIFEST is not set}"
work="${TMPDIR:-/tmp}/verify-weights.$$"

fail() { echo "verify-weights: $*" >&2; exit 1; }

[ -d "$dir" ] || fail "weights directory $dir not found"
[ -f "$manifest" ] || fail "manifest $manifest not found"
[ -s "$manifest" ] || fail "manifest $manifest is empty"

# Each line: 64 hex digits, two spaces (or space + '*'), a relative path without '..' components.
if grep -Ev '^[0-9a-fA-F]{64} [ *][^/]' "$manifest" | grep -q .; then
    fail "manifest $manifest has malformed lines (expected '<sha256>  <relative path>')"
fi
if grep -Eq '(^[0-9a-fA-F]{64} [ *]|/)\.\.(/|$)' "$manifest"; then
    fail "manifest $manifest names a path with '..'"
fi

mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
cd "$dir"

echo "verify-weights: checking $(wc -l < "$manifest" | tr -d ' ') files in $dir against $manifest"
sha256sum -c --strict --quiet "$manifest" || fail "checksum mismatch or missing file (see above)"

# Files present but not listed: a weights directory must hold only what the manifest names.
dir_manifest="${WEIGHTS_DIR_MANIFEST:-SHA256SUMS}"
dir_manifest="${dir_manifest#./}"
manifest_name="$dir_manifest"
case "$manifest" in "$dir"/*) manifest_name="${manifest#"$dir"/}" ;; esac
sed -E 's/^[0-9a-fA-F]{64} [ *]//; s|^\./||' "$manifest" | LC_ALL=C sort -u > "$work/listed"
find . -type f | sed 's|^\./||' | grep -Fxv -e "$manifest_name" -e "$dir_manifest" | LC_ALL=C sort -u > "$work/present" || true
LC_ALL=C comm -23 "$work/present" "$work/listed" > "$work/unlisted"
if [ -s "$work/unlisted" ]; then
    echo "verify-weights: files not in the manifest:" >&2
    sed 's/^/  /' "$work/unlisted" >&2
    fail "unlisted files in $dir"
fi
echo "verify-weights: OK"
