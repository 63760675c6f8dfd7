#!/bin/sh
# Pins images/manifest.yaml: downloads each artifact whose sha256 is `unpinned`, computes its sha256 and writes
# it into the manifest in place. A maintainer runs this (and reviews the diff) before a real bake: install.sh
# refuses unpinned artifacts.
#
# Usage: pin.sh [--manifest FILE] [--kubernetes-version VERSION] [--source SOURCE] [--force]
#   --manifest FILE            default: manifest.yaml beside this script
#   --kubernetes-version V     pin only this minor's release (default: every release)
#   --source SOURCE            upstream (default: each URL), a local directory holding each URL's file name, or
#                              https://MIRROR (MIRROR/<file name>)
#   --force                    re-download and re-hash pinned artifacts too, and report any that changed
#
# Trust: pinning trusts whatever the download returns at that moment (over HTTPS). Cross-check with upstream's
# published checksums where they exist (dl.k8s.io serves <URL>.sha256; GitHub releases of containerd, runc,
# cni-plugins, crictl and etcd publish checksum files) before committing the result.
# shellcheck source-path=SCRIPTDIR
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

manifest=$here/manifest.yaml
only=
source=upstream
force=0
die() {
  printf 'pin.sh: %s\n' "$*" >&2
  exit 1
}
while [ $# -gt 0 ]; do
  case $1 in
    --manifest) [ $# -ge 2 ] || die "--manifest needs a value"; manifest=$2; shift 2 ;;
    --kubernetes-version) [ $# -ge 2 ] || die "--kubernetes-version needs a value"; only=$2; shift 2 ;;
    --source) [ $# -ge 2 ] || die "--source needs a value"; source=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
[ -f "$manifest" ] || die "no manifest at $manifest"
if [ -n "$only" ]; then
  only=$(ballast_minor "$only") || die "not a Kubernetes version: $only"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ballast-pin.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ballast_flatten "$manifest" > "$work/flat" || die "cannot read $manifest (see above)"
ballast_releases "$work/flat" | awk '{ print $1 }' > "$work/minors"
if [ -n "$only" ]; then
  grep -qxF "$only" "$work/minors" || die "$manifest pins nothing for $only"
  printf '%s\n' "$only" > "$work/minors"
fi

: > "$work/pins"
: > "$work/failed"
while IFS= read -r minor; do
  ballast_components "$work/flat" "$minor" > "$work/components.$minor"
  while IFS='|' read -r name cversion url sha _ _; do
    if [ "$sha" != unpinned ] && [ "$force" = 0 ]; then
      continue
    fi
    file=${url##*/}
    key=$(printf '%s' "$url" | sha256sum | cut -c 1-16)
    if [ ! -f "$work/$key" ]; then
      case $source in
        upstream | http://* | https://*)
          from=$url
          [ "$source" = upstream ] || from=${source%/}/$file
          if ! curl -fsSL --retry 3 --connect-timeout 20 -o "$work/$key" "$from" < /dev/null; then
            printf '  - %s %s %s: cannot download %s\n' "$minor" "$name" "$cversion" "$from" >> "$work/failed"
            rm -f "$work/$key"
            continue
          fi
          ;;
        *)
          from=$source/$file
          if [ ! -f "$from" ]; then
            printf '  - %s %s %s: %s is not in %s\n' "$minor" "$name" "$cversion" "$file" "$source" >> "$work/failed"
            continue
          fi
          cp "$from" "$work/$key"
          ;;
      esac
    fi
    hash=$(ballast_sha256 "$work/$key")
    if [ "$sha" != unpinned ] && [ "$sha" != "$hash" ]; then
      printf 'pin.sh: WARNING: %s %s %s changed upstream: was %s, now %s\n' "$minor" "$name" "$cversion" "$sha" "$hash" >&2
    fi
    printf '%s|%s|%s\n' "$minor" "$name" "$hash" >> "$work/pins"
    printf 'pin.sh: %s %s %s: %s\n' "$minor" "$name" "$cversion" "$hash" >&2
  done < "$work/components.$minor"
done < "$work/minors"

# Rewrite only the sha256 lines of the pinned components, keeping everything else byte for byte.
awk -v pins="$work/pins" '
  BEGIN { while ((getline line < pins) > 0) { split(line, p, "|"); hash[p[1] "|" p[2]] = p[3] } }
  {
    line = $0
    if (line ~ /^[ ]*(#.*)?$/) { print; next }
    match(line, /^ */); indent = RLENGTH
    content = substr(line, indent + 1)
    key = content
    sub(/:.*$/, "", key)
    if (key ~ /^".*"$/ || key ~ /^'\''.*'\''$/) key = substr(key, 2, length(key) - 2)
    while (depth > 0 && indent <= indents[depth]) depth--
    depth++; indents[depth] = indent; keys[depth] = key
    if (depth == 5 && key == "sha256" && keys[1] == "releases" && keys[3] == "components" && ((keys[2] "|" keys[4]) in hash)) {
      printf "%" indent "s%s: %s\n", "", "sha256", hash[keys[2] "|" keys[4]]
      next
    }
    print
  }
' "$manifest" > "$work/manifest.new"
ballast_flatten "$work/manifest.new" > /dev/null || die "the rewritten manifest does not read back; $manifest is unchanged"
cat "$work/manifest.new" > "$manifest"

pinned=$(wc -l < "$work/pins" | tr -d ' ')
echo "pin.sh: pinned $pinned artifact(s) in $manifest" >&2
if [ -s "$work/failed" ]; then
  {
    echo "pin.sh: these could not be pinned and stay unpinned:"
    cat "$work/failed"
  } >&2
  exit 1
fi
