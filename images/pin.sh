#!/bin/sh
# Pins images/manifest.yaml: for every file (a mapping with `url` and `sha256`: each component's artifact, each
# add-on's manifest) and every image (a mapping with `reference` and `digest`), it asks upstream what the URL or
# the tag holds now, then
#   - fills what says `unpinned`: the sha256 of the download, or the digest the tag resolves to (the image index's
#     when the tag names an index, with `digestKind: index`; else the manifest's, `digestKind: manifest`), with a
#     `provenance:` block (pinnedBy, source, date) in place of its `reason:` line;
#   - checks what is pinned already: a tag that moved or a file whose hash changed is refused, naming the entry,
#     and then nothing at all is written (exit 1). pin.sh never overwrites a pin: to re-pin, write `unpinned`;
#   - leaves an entry it cannot reach untouched and says so (exit 3, after writing what it could pin).
# It writes only those fields of the entries it pins (the value, digestKind, reason, provenance): every other
# line, comment and entry stays byte for byte, which it checks before writing. A maintainer reviews the diff.
#
# Usage: pin.sh [--manifest FILE] [--kubernetes-version VERSION] [--source SOURCE] [--unpinned-only]
#   --manifest FILE            default: manifest.yaml beside this script
#   --kubernetes-version V     only this minor's release (entries outside `releases:` are always included)
#   --source SOURCE            files from upstream (default: each URL), a local directory holding each URL's file
#                              name, or https://MIRROR (MIRROR/<file name>); images always from their registry
#   --unpinned-only            fill `unpinned` entries only; do not re-check the pinned ones
# Environment:
#   BALLAST_PIN_REDIRECT       "FROM=TO ...": read a URL or image reference that starts with FROM from TO instead
#                              (the first FROM that matches). URLs map to URLs (https://, or http:// to a loopback
#                              host only), image references to references (a registry on a loopback host is spoken
#                              to in plain HTTP, any other in HTTPS). For tests and mirrors; the manifest's own URLs
#                              and references are never changed.
# Exit: 0 everything pinned or checked; 1 refused or bad input (nothing written); 2 usage; 3 some entries could
# not be reached (left untouched; the rest written).
#
# Trust: pinning trusts what upstream serves at that moment (over HTTPS; a registry's manifest is hashed here,
# and must match the digest the registry names). Cross-check with upstream's published checksums where they exist
# (dl.k8s.io serves <URL>.sha256; GitHub releases of containerd, runc, cni-plugins, crictl and etcd publish
# checksum files) before committing the result.
# shellcheck source-path=SCRIPTDIR
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

manifest=$here/manifest.yaml
only=
source=upstream
unpinned_only=0
die() {
  printf 'pin.sh: %s\n' "$*" >&2
  exit 1
}
usage() {
  sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --manifest) [ $# -ge 2 ] || usage; manifest=$2; shift 2 ;;
    --kubernetes-version) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
    --source) [ $# -ge 2 ] || usage; source=$2; shift 2 ;;
    --unpinned-only) unpinned_only=1; shift ;;
    -h | --help) usage ;;
    *) printf 'pin.sh: unknown argument %s\n' "$1" >&2; usage ;;
  esac
done
[ -f "$manifest" ] || die "no manifest at $manifest"
if [ -n "$only" ]; then
  only=$(ballast_minor "$only") || die "--kubernetes-version: not a Kubernetes version: $only (say 1.33 or 1.33.4)"
fi
case $source in
  upstream | https://?*) ;;
  http://*) die "--source $source: plain HTTP is refused; use https:// or a local directory" ;;
  *) [ -d "$source" ] || die "--source $source: no such directory (say upstream, a directory or https://MIRROR)" ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/ballast-pin.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Keys of a path are joined with the unit separator, which no key holds; messages show them with dots.
sep=$(printf '\037')

# is_loopback HOST[:PORT]: 127.x.y.z, localhost or [::1], with or without a port.
is_loopback() {
  printf '%s\n' "$1" | grep -Eq '^(127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|localhost|\[::1\])(:[0-9]{1,5})?$'
}

# url_host URL: the host[:port] of an http(s) URL.
url_host() {
  printf '%s\n' "$1" | sed -e 's|^[a-z]*://||' -e 's|[/?#].*$||' -e 's|^.*@||'
}

# The redirects, checked once: FROM and TO of one kind, plain HTTP only to loopback.
# set -f: the pairs are split on blanks, never globbed.
: > "$work/redirects"
set -f
for pair in ${BALLAST_PIN_REDIRECT:-}; do
  from=${pair%%=*}
  to=${pair#*=}
  if [ "$pair" = "$from" ] || [ -z "$from" ] || [ -z "$to" ]; then
    die "BALLAST_PIN_REDIRECT: \"$pair\" is not FROM=TO"
  fi
  case $pair in
    *\"* | *\\* | *\|* | *"'"*) die "BALLAST_PIN_REDIRECT: \"$pair\" holds a quote, a backslash or a |" ;;
  esac
  case $from in
    https://* | http://*)
      case $to in
        https://?*) ;;
        http://?*) is_loopback "$(url_host "$to")" ||
          die "BALLAST_PIN_REDIRECT: $from=$to: plain HTTP only to a loopback host (127.0.0.0/8, localhost, [::1]); use https://" ;;
        *) die "BALLAST_PIN_REDIRECT: $from=$to: a URL must map to an https:// (or loopback http://) URL" ;;
      esac
      ;;
    *://*) die "BALLAST_PIN_REDIRECT: $from: a URL must be https:// or http://" ;;
    *)
      case $to in
        *://*) die "BALLAST_PIN_REDIRECT: $from=$to: an image reference maps to a reference (registry/repository), without a scheme" ;;
      esac
      ;;
  esac
  printf '%s\t%s\n' "$from" "$to" >> "$work/redirects"
done
set +f

# redirect LOCATOR: the URL or reference to read LOCATOR from (the first matching FROM), or LOCATOR itself.
redirect() {
  awk -F '\t' -v want="$1" '
    !done && index(want, $1) == 1 { print $2 substr(want, length($1) + 1); done = 1 }
    END { if (!done) print want }
  ' "$work/redirects"
}

ballast_flatten "$manifest" > "$work/flat" || die "cannot read $manifest (see above)"

# The entries, in manifest order: kind|path|locator|value|provenance|digestKind, where kind is file (url +
# sha256) or image (reference + digest), and provenance is record (repository/path/commit), pin.sh, or none.
awk -F '\t' -v sep="$sep" '
  NF >= 2 {
    path = $1
    for (i = 2; i < NF - 1; i++) path = path sep $i
    key = $(NF - 1)
    if (NF == 2) { path = ""; key = $1 }
    if (!(path in seen)) { seen[path] = 1; order[++n] = path }
    field[path, key] = $NF
    if (key == "repository" && path ~ (sep "provenance$")) record[substr(path, 1, length(path) - 11)] = 1
    if (key == "pinnedBy" && path ~ (sep "provenance$")) pinned[substr(path, 1, length(path) - 11)] = 1
  }
  END {
    for (i = 1; i <= n; i++) {
      p = order[i]
      prov = (p in record) ? "record" : (p in pinned) ? "pin.sh" : "none"
      if (((p, "url") in field) && ((p, "sha256") in field))
        printf "file|%s|%s|%s|%s|\n", p, field[p, "url"], field[p, "sha256"], prov
      else if (((p, "reference") in field) && ((p, "digest") in field))
        printf "image|%s|%s|%s|%s|%s\n", p, field[p, "reference"], field[p, "digest"], prov, field[p, "digestKind"]
    }
  }
' "$work/flat" > "$work/entries"
[ -s "$work/entries" ] || die "$manifest has no file (url + sha256) or image (reference + digest) to pin"
if [ -n "$only" ]; then
  ballast_releases "$work/flat" | awk '{ print $1 }' | grep -qxF "$only" || die "$manifest pins nothing for $only"
fi

: > "$work/pins"
: > "$work/refused"
: > "$work/unreachable"
: > "$work/dead"
checked=0

# note FILE ENTRY MESSAGE: one line of a report.
note() {
  printf '  - %s: %s\n' "$2" "$3" >> "$work/$1"
}

# curl_fail CODE URL: curl's exit code as a reason; a host that cannot be resolved or reached is remembered, so
# its other entries fail at once instead of waiting for each retry.
curl_fail() {
  case $1 in
    6 | 7 | 28) url_host "$2" >> "$work/dead"; reason="cannot reach $(url_host "$2") (curl exit $1)" ;;
    22) reason="the server answered with an error (curl exit 22)" ;;
    63) reason="larger than pin.sh accepts (curl exit 63)" ;;
    *) reason="curl exit $1" ;;
  esac
}

# host_dead URL: did an earlier entry find this URL's host unreachable?
host_dead() {
  grep -qxF "$(url_host "$1")" "$work/dead"
}

# curl_protocols URL: what curl may speak for URL: HTTP only to a loopback host, and redirects only to HTTPS.
curl_protocols() {
  if is_loopback "$(url_host "$1")"; then
    printf '%s\n' '=http,https'
  else
    printf '%s\n' '=https'
  fi
}

# fetch_file URL DEST: downloads URL (as redirected, or from --source) to DEST; sets "from" to what it read.
# Status 1 with "reason" set when it cannot.
fetch_file() {
  case $source in
    upstream) from=$(redirect "$1") ;;
    https://*) from=${source%/}/${1##*/} ;;
    *)
      from=$source/${1##*/}
      if [ ! -f "$from" ]; then
        reason="${1##*/} is not in $source"
        return 1
      fi
      cp "$from" "$2"
      from=file://$(cd "$source" && pwd)/${1##*/}
      return 0
      ;;
  esac
  case $from in
    https://*) ;;
    http://*) is_loopback "$(url_host "$from")" || { reason="$from: plain HTTP is refused (only to a loopback host)"; return 1; } ;;
    *) reason="$from: not an https:// URL"; return 1 ;;
  esac
  if host_dead "$from"; then
    reason="cannot reach $(url_host "$from") (as above)"
    return 1
  fi
  protocols=$(curl_protocols "$from")
  # Release files are at most a few hundred MiB; 2 GiB bounds the disk a wrong URL can fill.
  if curl -fsS -L --proto "$protocols" --proto-redir '=https' --retry 2 --retry-delay 1 --connect-timeout 20 \
    --max-time 1800 --max-filesize 2147483648 -o "$2" "$from" < /dev/null 2> "$work/curl.err"; then
    return 0
  else
    curl_fail $? "$from"
  fi
  rm -f "$2"
  return 1
}

# header NAME FILE: the value of header NAME (lowercase) in the last response of curl's -D FILE.
header() {
  tr -d '\r' < "$2" | awk -v want="$1" '
    /^HTTP\// { split("", h); next }
    { i = index($0, ":"); if (i > 0) { k = tolower(substr($0, 1, i - 1)); v = substr($0, i + 1); sub(/^ +/, "", v); h[k] = v } }
    END { if (want in h) print h[want] }
  '
}

accept='application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json'

# registry_get URL AUTH: GET a registry's manifest into $work/body with headers in $work/headers; prints the HTTP
# status (000 when nothing answered). AUTH is an Authorization header or empty.
registry_get() {
  protocols=$(curl_protocols "$1")
  set -- "$1" "$protocols" "$2"
  if [ -n "$3" ]; then
    curl -sS -L --proto "$2" --proto-redir '=https' --retry 2 --retry-delay 1 --connect-timeout 20 --max-time 120 \
      --max-filesize 4194304 -H "Accept: $accept" -H "$3" -D "$work/headers" -o "$work/body" \
      -w '%{http_code}' "$1" < /dev/null 2> "$work/curl.err"
  else
    curl -sS -L --proto "$2" --proto-redir '=https' --retry 2 --retry-delay 1 --connect-timeout 20 --max-time 120 \
      --max-filesize 4194304 -H "Accept: $accept" -D "$work/headers" -o "$work/body" \
      -w '%{http_code}' "$1" < /dev/null 2> "$work/curl.err"
  fi
}

# auth_param NAME CHALLENGE: a parameter of a WWW-Authenticate Bearer challenge.
auth_param() {
  printf '%s\n' "$2" | sed -n "s/.*[ ,]$1=\"\\([^\"]*\\)\".*/\\1/p"
}

# resolve_image REFERENCE: what the tag resolves to now. Sets "digest" (sha256:...), "kind" (index|manifest) and
# "from" (the reference it read). Status 1 with "reason" set when it cannot.
resolve_image() {
  from=$(redirect "$1")
  case $from in
    *@*) reason="$from names a digest, not a tag: pin.sh resolves tags"; return 1 ;;
  esac
  name=${from%:*}
  tag=${from##*:}
  case $tag in
    */* | "$from") reason="$from has no tag (registry/repository:tag)"; return 1 ;;
  esac
  registry=${name%%/*}
  repository=${name#*/}
  case $registry in
    *.* | *:* | localhost) ;;
    *) registry=docker.io; repository=$name ;;
  esac
  [ "$name" != "$registry" ] || { reason="$from has no repository"; return 1; }
  api=$registry
  if [ "$registry" = docker.io ]; then
    api='registry-1.docker.io'
    case $repository in */*) ;; *) repository=library/$repository ;; esac
  fi
  if is_loopback "$api"; then scheme=http; else scheme=https; fi
  url=$scheme://$api/v2/$repository/manifests/$tag
  if host_dead "$url"; then
    reason="cannot reach $api (as above)"
    return 1
  fi
  status=$(registry_get "$url" "") || { curl_fail $? "$url"; return 1; }
  if [ "$status" = 401 ]; then
    # Anonymous pulls: the registry names a token service in its challenge (docker.io, quay.io, ECR Public).
    challenge=$(header www-authenticate "$work/headers")
    realm=$(auth_param realm " $challenge")
    case $challenge in
      Bearer* | bearer*) ;;
      *) reason="$api wants credentials ($challenge): pin.sh pulls anonymously"; return 1 ;;
    esac
    case $realm in
      https://*) ;;
      http://*) is_loopback "$(url_host "$realm")" || { reason="$api's token service $realm is plain HTTP: refused"; return 1; } ;;
      *) reason="$api's challenge names no token service: $challenge"; return 1 ;;
    esac
    service=$(auth_param service " $challenge")
    scope=$(auth_param scope " $challenge")
    [ -n "$scope" ] || scope=repository:$repository:pull
    protocols=$(curl_protocols "$realm")
    if ! curl -fsS -G --proto "$protocols" --proto-redir '=https' --retry 2 --retry-delay 1 --connect-timeout 20 \
      --max-time 60 --max-filesize 1048576 --data-urlencode "service=$service" --data-urlencode "scope=$scope" \
      -o "$work/token.json" "$realm" < /dev/null 2> "$work/curl.err"; then
      curl_fail $? "$realm"
      reason="$api's token service $realm: $reason"
      return 1
    fi
    # The token is a bearer credential: kept in the work directory (mode 0700), never printed.
    token=$(tr -d '\n' < "$work/token.json" | sed -n 's/.*"token"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
    [ -n "$token" ] ||
      token=$(tr -d '\n' < "$work/token.json" | sed -n 's/.*"access_token"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
    [ -n "$token" ] || { reason="$api's token service $realm gave no token"; return 1; }
    status=$(registry_get "$url" "Authorization: Bearer $token") || { curl_fail $? "$url"; return 1; }
  fi
  case $status in
    200) ;;
    401 | 403) reason="$api refused an anonymous pull of $repository:$tag (HTTP $status)"; return 1 ;;
    404) reason="$api has no $repository:$tag (HTTP 404)"; return 1 ;;
    *) reason="$api answered HTTP $status for $repository:$tag"; return 1 ;;
  esac
  digest=sha256:$(ballast_sha256 "$work/body")
  named=$(header docker-content-digest "$work/headers")
  if [ -n "$named" ] && [ "$named" != "$digest" ]; then
    reason="$api names $named for $repository:$tag, but the manifest it served hashes to $digest"
    return 1
  fi
  media=$(header content-type "$work/headers" | sed 's/[ ;].*//')
  case $media in
    application/vnd.oci.image.index.v1+json | application/vnd.docker.distribution.manifest.list.v2+json) kind=index ;;
    application/vnd.oci.image.manifest.v1+json | application/vnd.docker.distribution.manifest.v2+json) kind=manifest ;;
    *)
      # A registry that serves OCI content as plain JSON: what the document holds says (an index lists
      # `manifests`; an image manifest has a `config` and `layers`), since its own mediaType is optional.
      if grep -q '"manifests"[[:space:]]*:' "$work/body"; then
        kind=index
      elif grep -q '"layers"[[:space:]]*:' "$work/body" && grep -q '"config"[[:space:]]*:' "$work/body"; then
        kind=manifest
      else
        reason="$api served $repository:$tag as ${media:-an unknown media type}, neither an image index nor an image manifest"
        return 1
      fi
      ;;
  esac
  return 0
}

today=$(date -u +%Y-%m-%dT%H:%M:%SZ)
while IFS='|' read -r kind path locator value prov pinned_kind; do
  case $path in
    "releases$sep"*)
      minor=${path#"releases$sep"}
      minor=${minor%%"$sep"*}
      [ -z "$only" ] || [ "$minor" = "$only" ] || continue
      ;;
  esac
  if [ "$kind" = file ]; then field=sha256; else field=digest; fi
  entry=$(printf '%s' "$path" | tr "$sep" '.').$field
  case $locator in
    *\"* | *\\* | *\|* | *" "*)
      note refused "$entry" "\"$locator\" holds a quote, a backslash, a | or a space: not a URL or reference pin.sh reads"
      continue
      ;;
  esac
  if [ "$value" = unpinned ]; then
    if [ "$prov" = record ]; then
      note refused "$entry" "unpinned, yet its provenance names a public record: give the record's value, or remove the provenance"
      continue
    fi
  else
    # A pin's shape first: a malformed one is refused, never "checked".
    if [ "$kind" = file ]; then
      ballast_is_sha256 "$value" || { note refused "$entry" "\"$value\" is neither 64 lowercase hex digits nor unpinned"; continue; }
    else
      if [ "${value#sha256:}" = "$value" ] || ! ballast_is_sha256 "${value#sha256:}"; then
        note refused "$entry" "\"$value\" is neither sha256:<64 lowercase hex digits> nor unpinned"
        continue
      fi
    fi
    [ "$unpinned_only" = 0 ] || continue
  fi
  reason=
  if [ "$kind" = file ]; then
    if ! fetch_file "$locator" "$work/download"; then
      note unreachable "$entry" "$locator: $reason"
      printf 'pin.sh: %s: cannot reach it, left as it is: %s\n' "$entry" "$reason" >&2
      continue
    fi
    got=$(ballast_sha256 "$work/download")
    rm -f "$work/download"
    got_kind=
  else
    if ! resolve_image "$locator"; then
      note unreachable "$entry" "$locator: $reason"
      printf 'pin.sh: %s: cannot reach it, left as it is: %s\n' "$entry" "$reason" >&2
      continue
    fi
    got=$digest
    got_kind=$kind
  fi
  if [ "$value" = unpinned ]; then
    printf '%s|%s|%s|%s|%s\n' "$path" "$field" "$got" "$got_kind" "$from" >> "$work/pins"
    printf 'pin.sh: %s: %s%s (from %s)\n' "$entry" "$got" "${got_kind:+ ($got_kind)}" "$from" >&2
  elif [ "$value" = "$got" ]; then
    checked=$((checked + 1))
    printf 'pin.sh: %s: unchanged (%s)\n' "$entry" "$from" >&2
  elif [ "$kind" = file ]; then
    note refused "$entry" "the file changed: pinned sha256 $value, but $from now hashes to $got"
  else
    note refused "$entry" "the tag moved: pinned $value${pinned_kind:+ ($pinned_kind)}, but $from now resolves to $got ($got_kind)"
  fi
done < "$work/entries"

if [ -s "$work/refused" ]; then
  {
    echo "pin.sh: refused; $manifest is unchanged:"
    cat "$work/refused"
    echo "pin.sh: a pin that upstream no longer serves is a release that changed under its name: find out why before"
    echo "        you trust it; to pin it anew, write 'unpinned' in its place and run pin.sh again."
  } >&2
  exit 1
fi

if [ -s "$work/pins" ]; then
  # Rewrite only the pinned entries' own fields. Pass 1 notes which of digestKind and provenance each pinned
  # mapping already has (they are rewritten in place); pass 2 rewrites the value line (adding digestKind and
  # provenance after it when absent), drops `reason:`, and replaces an old `provenance:` block.
  awk -v pins="$work/pins" -v sep="$sep" -v today="$today" '
    BEGIN {
      while ((getline line < pins) > 0) {
        split(line, p, "|")
        pinned[p[1]] = 1; field[p[1]] = p[2]; value[p[1]] = p[3]; kind[p[1]] = p[4]; from[p[1]] = p[5]
      }
    }
    function provenance(indent) {
      printf "%" indent "s%s\n", "", "provenance:"
      printf "%" (indent + 2) "s%s\n", "", "pinnedBy: images/pin.sh"
      printf "%" (indent + 2) "s%s\n", "", "source: \"" from[parent] "\""
      printf "%" (indent + 2) "s%s\n", "", "date: \"" today "\""
    }
    FNR == 1 { depth = 0; skipping = 0 }
    {
      line = $0
      sub(/\r$/, "", line)
      if (line ~ /^[ ]*(#.*)?$/ || (line == "---" && depth == 0)) { if (FNR != NR) print; next }
      match(line, /^ */); indent = RLENGTH
      key = substr(line, indent + 1)
      if (key ~ /^"/) { key = substr(key, 2); key = substr(key, 1, index(key, "\"") - 1) }
      else if (key ~ /^'\''/) { key = substr(key, 2); key = substr(key, 1, index(key, "'\''") - 1) }
      else sub(/:( .*)?$/, "", key)
      while (depth > 0 && indent <= indents[depth]) depth--
      parent = ""
      for (i = 1; i <= depth; i++) parent = (i == 1) ? keys[i] : parent sep keys[i]
      depth++; indents[depth] = indent; keys[depth] = key
      if (FNR == NR) { if (parent in pinned) has[parent, key] = 1; next }
      if (skipping) { if (indent > skip) next; skipping = 0 }
      if (!(parent in pinned)) { print; next }
      if (key == field[parent]) {
        printf "%" indent "s%s: %s\n", "", key, value[parent]
        if (kind[parent] != "" && !has[parent, "digestKind"]) printf "%" indent "s%s: %s\n", "", "digestKind", kind[parent]
        if (!has[parent, "provenance"]) provenance(indent)
        next
      }
      if (key == "digestKind" && kind[parent] != "") { printf "%" indent "s%s: %s\n", "", key, kind[parent]; next }
      if (key == "reason") { skipping = 1; skip = indent; next }
      if (key == "provenance") { provenance(indent); skipping = 1; skip = indent; next }
      print
    }
  ' "$manifest" "$manifest" > "$work/manifest.new"
  ballast_flatten "$work/manifest.new" > "$work/flat.new" ||
    die "the rewritten manifest does not read back (a bug in pin.sh); $manifest is unchanged"
  # The check that nothing else changed: both manifests read the same once the pinned entries' own fields are
  # set aside, and each pinned entry reads back as pinned.
  awk -F '|' -v sep="$sep" '{ print $1 }' "$work/pins" | tr "$sep" '\t' > "$work/pinned.paths"
  owned() {
    awk -F '\t' -v paths="$work/pinned.paths" '
      BEGIN { while ((getline p < paths) > 0) mine[p] = 1 }
      {
        path = $1
        for (i = 2; i < NF; i++) {
          if ((path in mine) && ($i == "sha256" || $i == "digest" || $i == "digestKind" || $i == "reason" || $i == "provenance")) next
          path = path "\t" $i
        }
        print
      }
    ' "$1"
  }
  owned "$work/flat" > "$work/rest.old"
  owned "$work/flat.new" > "$work/rest.new"
  cmp -s "$work/rest.old" "$work/rest.new" ||
    die "the rewrite would change more than the pinned entries (a bug in pin.sh); $manifest is unchanged"
  while IFS='|' read -r path field got _; do
    want=$(printf '%s\t%s\t%s' "$path" "$field" "$got" | tr "$sep" '\t')
    grep -qxF "$want" "$work/flat.new" ||
      die "the rewrite lost the pin of $(printf '%s' "$path" | tr "$sep" '.') (a bug in pin.sh); $manifest is unchanged"
  done < "$work/pins"
  cat "$work/manifest.new" > "$manifest"
fi

pinned=$(wc -l < "$work/pins" | tr -d ' ')
echo "pin.sh: pinned $pinned, checked $checked unchanged, in $manifest" >&2
if [ -s "$work/unreachable" ]; then
  {
    echo "pin.sh: these could not be reached and are left as they are:"
    cat "$work/unreachable"
  } >&2
  exit 3
fi
