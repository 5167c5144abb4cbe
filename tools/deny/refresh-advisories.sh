#!/usr/bin/env bash
# Refreshes the RustSec advisory snapshot in tools/deny/advisory-db from a git checkout of the
# RustSec advisory database (github.com/rustsec/advisory-db; CC0-1.0). `make deny` checks the
# workspace against this snapshot, because CI reaches no git host (docs/testing.md).
#
# Kept: the advisories (crates/<name>/*.md, verbatim) of every crate named in Cargo.lock, and
# names.txt, the name of every crate the whole database has an advisory for. tools/deny/check.sh
# refuses to run when Cargo.lock names a crate of names.txt whose advisories were not kept (a
# dependency added since the refresh): the snapshot then answers for Cargo.lock exactly as the
# whole database at that commit would.
#
# Usage (from anywhere; git must see the checkout):
#   git clone https://github.com/rustsec/advisory-db /tmp/advisory-db
#   bash tools/deny/refresh-advisories.sh /tmp/advisory-db
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
src=${1:?usage: refresh-advisories.sh <advisory-db checkout>}
out=$here/advisory-db

[[ -d $src/crates ]] || { echo "no crates/ in $src: not the advisory database" >&2; exit 1; }
commit=$(git -C "$src" rev-parse HEAD)
date=$(git -C "$src" show -s --format=%cI HEAD)
[[ -z $(git -C "$src" status --porcelain -- crates) ]] || { echo "$src has local changes under crates/" >&2; exit 1; }

rm -rf "$out/crates"
mkdir -p "$out/crates"
(cd "$src/crates" && find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n') | LC_ALL=C sort >"$out/names.txt"
kept=0
while IFS= read -r name; do
	if [[ -d $src/crates/$name ]]; then
		cp -r "$src/crates/$name" "$out/crates/$name"
		kept=$((kept + 1))
	fi
done < <(sed -n 's/^name = "\(.*\)"$/\1/p' "$repo/Cargo.lock" | LC_ALL=C sort -u)
rm -rf "$out/LICENSES"
cp -r "$src/LICENSE.txt" "$src/LICENSES" "$out/"
printf 'commit=%s\ndate=%s\n' "$commit" "$date" >"$out/SNAPSHOT"
echo "advisory snapshot: $commit ($date), $kept crates of Cargo.lock with advisories," \
	"$(find "$out/crates" -name '*.md' | wc -l) advisories" >&2
