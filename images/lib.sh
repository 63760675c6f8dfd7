# shellcheck shell=sh
# Shared by install.sh, verify.sh and pin.sh (sourced, never run): reading images/manifest.yaml and the image's
# record (/etc/ballast/components.yaml) with POSIX awk, so a base image needs no YAML library.
#
# The reader takes a strict subset of YAML and refuses the rest with the line number: block mappings indented
# with spaces, plain or quoted scalars without escapes, comments. No lists, flow style, anchors, tags or
# multi-line strings. state/src/components.rs refuses the same things, so the two readers agree.

# ballast_flatten FILE: one line per scalar: the keys from the top, then the value, separated by tabs.
#   releases<TAB>1.33<TAB>kubernetes<TAB>1.33.4
ballast_flatten() {
  awk '
    function fail(message) {
      printf "%s:%d: %s\n", FILENAME, FNR, message > "/dev/stderr"
      failed = 1
      exit 1
    }
    # A scalar, plain or quoted; sets "rest" to what follows it.
    function scalar(text,    quote, end) {
      quote = substr(text, 1, 1)
      if (quote == "\"" || quote == "'\''") {
        end = index(substr(text, 2), quote)
        if (end == 0) fail("unterminated quoted string")
        rest = substr(text, end + 2)
        text = substr(text, 2, end - 1)
        if (quote == "\"" && index(text, "\\") > 0) fail("escapes in quoted strings are not supported")
        return text
      }
      rest = ""
      return text
    }
    {
      line = $0
      sub(/\r$/, "", line)
      if (line ~ /^[ ]*$/ || line ~ /^[ ]*#/) next
      if (line == "---" && !seen) next
      if (index(line, "\t") > 0) fail("tabs are not supported")
      seen = 1
      match(line, /^ */)
      indent = RLENGTH
      content = substr(line, indent + 1)
      if (content ~ /^-( |$)/) fail("lists are not supported: use a mapping")
      # The key, plain or quoted, up to ": " or a final ":".
      first = substr(content, 1, 1)
      if (first == "\"" || first == "'\''") {
        key = scalar(content)
        if (substr(rest, 1, 1) != ":") fail("expected \":\" after a quoted key")
        value = substr(rest, 2)
      } else {
        colon = index(content, ": ")
        if (colon == 0 && content ~ /:$/) colon = length(content)
        if (colon == 0) fail("expected \"key: value\" or \"key:\"")
        key = substr(content, 1, colon - 1)
        value = substr(content, colon + 1)
      }
      sub(/^ +/, "", value)
      if (value ~ /^#/) value = ""
      if (value ~ /^[\[{&*|>!]/) fail("flow style, anchors, tags and block scalars are not supported")
      if (value != "") {
        value = scalar(value)
        if (rest != "") {
          if (rest !~ /^ +(#.*)?$/) fail("unexpected text after a quoted value")
        } else {
          sub(/ +#.*$/, "", value)
          sub(/ +$/, "", value)
        }
      }
      # Where this key sits: close every key at this indentation or deeper.
      while (depth > 0 && indent <= indents[depth]) depth--
      if (depth > 0 && !open[depth]) fail("a key under a scalar value")
      depth++
      indents[depth] = indent
      keys[depth] = key
      open[depth] = (value == "")
      if (value != "") {
        path = keys[1]
        for (i = 2; i <= depth; i++) path = path "\t" keys[i]
        print path "\t" value
      }
    }
    END { if (failed) exit 1 }
  ' "$1"
}

# ballast_minor VERSION: 1.33.4 / v1.33.4 / 1.33 -> 1.33; nothing (and status 1) for anything else.
ballast_minor() {
  printf '%s\n' "$1" | sed -n 's/^v\{0,1\}\([0-9][0-9]*\.[0-9][0-9]*\)\(\.[0-9][0-9]*\)\{0,1\}$/\1/p' | grep .
}

# ballast_patch VERSION: the full version when VERSION names a patch (1.33.4), else nothing.
ballast_patch() {
  printf '%s\n' "$1" | sed -n 's/^v\{0,1\}\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)$/\1/p'
}

# ballast_releases FLAT: "minor kubernetes" per release, from ballast_flatten's output.
ballast_releases() {
  awk -F '\t' '$1 == "releases" && NF == 4 && $3 == "kubernetes" { print $2, $4 }' "$1"
}

# ballast_components FLAT MINOR: name|version|url|sha256|archive|versionCommand per component, in manifest order.
ballast_components() {
  awk -F '\t' -v minor="$2" '
    $1 == "releases" && $2 == minor && $3 == "components" && NF == 6 {
      if (!($4 in seen)) { seen[$4] = 1; order[++n] = $4 }
      field[$4, $5] = $6
    }
    END {
      for (i = 1; i <= n; i++) {
        c = order[i]
        printf "%s|%s|%s|%s|%s|%s\n", c, field[c, "version"], field[c, "url"], field[c, "sha256"],
          field[c, "archive"], field[c, "versionCommand"]
      }
    }
  ' "$1"
}

# ballast_pinned_by FLAT MINOR NAME: the `provenance.pinnedBy` of component NAME (empty when its pin comes from a
# public record): `tools/build-go` marks an artifact built from source here, which the image record carries.
ballast_pinned_by() {
  awk -F '\t' -v minor="$2" -v name="$3" '
    $1 == "releases" && $2 == minor && $3 == "components" && $4 == name && $5 == "provenance" && $6 == "pinnedBy" && NF == 7 { print $7; exit }
  ' "$1"
}

# ballast_files FLAT MINOR: name|path in archive|install path per file.
ballast_files() {
  awk -F '\t' -v minor="$2" '
    $1 == "releases" && $2 == minor && $3 == "components" && $5 == "files" && NF == 7 {
      printf "%s|%s|%s\n", $4, $6, $7
    }
  ' "$1"
}

# ballast_sha256 FILE: the file's sha256, lowercase hex.
ballast_sha256() {
  sha256sum "$1" | cut -d ' ' -f 1
}

# ballast_is_sha256 VALUE: 64 lowercase hex digits?
ballast_is_sha256() {
  printf '%s\n' "$1" | grep -Eq '^[0-9a-f]{64}$'
}

# ballast_addon_images FLAT MINOR: addon|image|reference|digest|digestKind per add-on image (the sandbox image
# among them), pinned or not. `provenance` and `reason` are for people and Rust (state/src/components/): the
# bake reads neither.
ballast_addon_images() {
  awk -F '\t' -v minor="$2" '
    $1 == "releases" && $2 == minor && $3 == "addons" && $5 == "images" && NF == 8 {
      key = $4 "|" $6
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      field[key, $7] = $8
    }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]
        printf "%s|%s|%s|%s\n", k, field[k, "reference"], field[k, "digest"], field[k, "digestKind"]
      }
    }
  ' "$1"
}

# ballast_media_kind MEDIATYPE: what `digestKind` calls an object of that media type: `index` (an OCI image
# index or a Docker manifest list: a multi-platform image) or `manifest` (one platform's image); nothing for
# anything else.
ballast_media_kind() {
  case $1 in
    application/vnd.oci.image.index.v1+json | application/vnd.docker.distribution.manifest.list.v2+json) echo index ;;
    application/vnd.oci.image.manifest.v1+json | application/vnd.docker.distribution.manifest.v2+json) echo manifest ;;
  esac
}

# ballast_addon_manifests FLAT MINOR: addon|url|sha256|format per add-on manifest (the CNIs').
ballast_addon_manifests() {
  awk -F '\t' -v minor="$2" '
    $1 == "releases" && $2 == minor && $3 == "addons" && $5 == "manifest" && NF == 7 {
      if (!($4 in seen)) { seen[$4] = 1; order[++n] = $4 }
      field[$4, $6] = $7
    }
    END { for (i = 1; i <= n; i++) printf "%s|%s|%s|%s\n", order[i], field[order[i], "url"], field[order[i], "sha256"], field[order[i], "format"] }
  ' "$1"
}

# ballast_arch FLAT: the manifest's architecture (amd64, arm64).
ballast_arch() {
  awk -F '\t' '$1 == "arch" && NF == 2 { print $2; exit }' "$1"
}

# ballast_image_archive REFERENCE: the file an offline bake takes an add-on image from (install.sh --source DIR
# or https://MIRROR): the reference with every "/" and ":" made "_", then ".oci.tar".
#   registry.k8s.io/coredns/coredns:v1.12.0 -> registry.k8s.io_coredns_coredns_v1.12.0.oci.tar
ballast_image_archive() {
  printf '%s.oci.tar\n' "$1" | tr '/:' '__'
}

# ballast_containerd_tool FILES NAME: where the containerd component's files list installs NAME (containerd,
# ctr): the "from|to" of the line whose install path ends in /NAME.
ballast_containerd_tool() {
  awk -F '|' -v want="$2" '$1 == "containerd" && $3 ~ ("/" want "$") { print $2 "|" $3; exit }' "$1"
}

# A private containerd for the add-on images (install.sh stages them, verify.sh reads them): its own config,
# root, state and socket under DIR, so it never meets a containerd the host runs. Plugins that would touch the
# host or start servers (CRI, /opt/containerd, the snapshotters that probe mounts) are off: the images are
# stored, not unpacked.
#   ballast_containerd_start CONTAINERD CTR ROOT DIR: starts it and waits for its socket (30 s); status 1 if
#   it does not come up (its log: DIR/containerd.log). Call it in the script's own shell, not in $(...): the
#   caller's EXIT trap must be able to stop it.
#   ballast_ctr ARGS...: ctr against it, in containerd's namespace for Kubernetes (k8s.io).
#   ballast_containerd_stop: stops it (SIGTERM, then waits); safe to call when it is not running.
ballast_containerd_pid=
ballast_containerd_start() {
  ballast_containerd_ctr=$2
  ballast_containerd_address=$4/containerd.sock
  mkdir -p "$4/state" "$3"
  {
    echo 'version = 2'
    echo 'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.overlayfs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]'
  } > "$4/config.toml"
  "$1" --config "$4/config.toml" --root "$3" --state "$4/state" --address "$ballast_containerd_address" \
    < /dev/null > "$4/containerd.log" 2>&1 &
  ballast_containerd_pid=$!
  ballast_containerd_tries=0
  until "$ballast_containerd_ctr" --address "$ballast_containerd_address" version > /dev/null 2>&1; do
    ballast_containerd_tries=$((ballast_containerd_tries + 1))
    if ! kill -0 "$ballast_containerd_pid" 2> /dev/null || [ "$ballast_containerd_tries" -gt 150 ]; then
      ballast_containerd_stop
      return 1
    fi
    sleep 0.2
  done
}
ballast_ctr() {
  "$ballast_containerd_ctr" --address "$ballast_containerd_address" --namespace k8s.io "$@" < /dev/null
}
ballast_containerd_stop() {
  [ -n "$ballast_containerd_pid" ] || return 0
  kill "$ballast_containerd_pid" 2> /dev/null || true
  wait "$ballast_containerd_pid" 2> /dev/null || true
  ballast_containerd_pid=
}

# ballast_image_row LISTING NAME: the line of `ctr images ls` output LISTING whose REF is NAME.
ballast_image_row() {
  awk -v name="$2" '$1 == name { print; exit }' "$1"
}

# ballast_image_digest LISTING NAME: the target digest of image NAME in `ctr images ls` output LISTING.
ballast_image_digest() {
  awk -v name="$2" '$1 == name { print $3; exit }' "$1"
}

# ballast_image_type LISTING NAME: the media type of image NAME's target in `ctr images ls` output LISTING.
ballast_image_type() {
  awk -v name="$2" '$1 == name { print $2; exit }' "$1"
}

# ballast_image_has_platform LISTING NAME PLATFORM: does image NAME list PLATFORM (linux/amd64)?
ballast_image_has_platform() {
  awk -v name="$2" -v want="$3" '
    $1 == name { for (i = 4; i <= NF; i++) { n = split($i, p, ","); for (j = 1; j <= n; j++) if (p[j] == want) found = 1 } }
    END { exit !found }
  ' "$1"
}
