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

# ballast_addon_images FLAT MINOR: addon|image|reference|digest per pinned add-on image.
ballast_addon_images() {
  awk -F '\t' -v minor="$2" '
    $1 == "releases" && $2 == minor && $3 == "addons" && $5 == "images" && NF == 8 {
      key = $4 "|" $6
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      field[key, $7] = $8
    }
    END { for (i = 1; i <= n; i++) printf "%s|%s|%s\n", order[i], field[order[i], "reference"], field[order[i], "digest"] }
  ' "$1"
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
