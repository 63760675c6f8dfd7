#!/bin/sh
# Bakes Ballast's node contents into a root filesystem: the components pinned in images/manifest.yaml for one
# Kubernetes minor version, nodeup, their systemd units, the sysctls and kernel modules Kubernetes needs, the
# add-ons' CNI manifests and images (into containerd's store, by digest); then cleans the image (SSH host keys,
# machine-id, cloud-init state, logs, shell history).
# Every artifact's sha256 and image's digest is checked, and every file to install found, BEFORE anything is
# written under the root: an unpinned or mismatching artifact or image stops the bake with nothing installed.
#
# Usage: install.sh --manifest FILE --kubernetes-version VERSION --nodeup FILE [--source SOURCE] [--root DIR]
#                   [--images FILE]
#        install.sh --manifest FILE --kubernetes-version VERSION --print-plan
#   --manifest FILE             the component manifest (env BALLAST_MANIFEST; default: manifest.yaml beside this)
#   --kubernetes-version V      1.33 or 1.33.4; a patch must be the one the manifest pins (env BALLAST_KUBERNETES_VERSION)
#   --source SOURCE             where artifacts come from (env BALLAST_ARTIFACTS; default upstream):
#                                 upstream        each component's URL; each image from its registry
#                                 DIR             a local directory holding each URL's file name, and each image
#                                                 as an OCI archive <reference, / and : made _>.oci.tar (offline)
#                                 https://MIRROR  MIRROR/<the URL's file name>, MIRROR/<the image's archive>
#   --nodeup FILE               the nodeup binary to bake in (env BALLAST_NODEUP)
#   --root DIR                  the image's root (env BALLAST_ROOT; default /): a chroot, a DESTDIR, or the build VM
#   --images FILE               the local cloud's image manifest (images.yaml, made by tools/build-go: reference,
#                               digest): its images are baked as the add-ons' are, from --source DIR (local only)
#   --print-plan                print what the manifest pins for that version and exit; installs nothing
#
# Writes /etc/ballast/components.yaml (the versions and checksums installed; see images/README.md), which
# images/verify.sh and nodeup read.
# shellcheck source-path=SCRIPTDIR
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

manifest=${BALLAST_MANIFEST:-$here/manifest.yaml}
version=${BALLAST_KUBERNETES_VERSION:-}
source=${BALLAST_ARTIFACTS:-upstream}
nodeup=${BALLAST_NODEUP:-}
root=${BALLAST_ROOT:-/}
local_images=
print_plan=0

die() {
  printf 'install.sh: %s\n' "$*" >&2
  exit 1
}
usage() {
  sed -n '9,26p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --manifest) [ $# -ge 2 ] || usage; manifest=$2; shift 2 ;;
    --kubernetes-version) [ $# -ge 2 ] || usage; version=$2; shift 2 ;;
    --source) [ $# -ge 2 ] || usage; source=$2; shift 2 ;;
    --nodeup) [ $# -ge 2 ] || usage; nodeup=$2; shift 2 ;;
    --root) [ $# -ge 2 ] || usage; root=$2; shift 2 ;;
    --images) [ $# -ge 2 ] || usage; local_images=$2; shift 2 ;;
    --print-plan) print_plan=1; shift ;;
    -h | --help) usage ;;
    *) printf 'install.sh: unknown argument %s\n' "$1" >&2; usage ;;
  esac
done

[ -n "$version" ] || die "--kubernetes-version is required (e.g. 1.33)"
[ -f "$manifest" ] || die "no manifest at $manifest"
minor=$(ballast_minor "$version") || die "$version is not a Kubernetes version: expected 1.33 or 1.33.4"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/ballast-install.XXXXXX")
cleanup() {
  ballast_containerd_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ballast_flatten "$manifest" > "$work/flat" || die "cannot read $manifest (see above)"
pinned=$(ballast_releases "$work/flat" | awk -v m="$minor" '$1 == m { print $2 }')
if [ -z "$pinned" ]; then
  known=$(ballast_releases "$work/flat" | awk '{ print $1 }' | sort -t . -k 1,1n -k 2,2n | paste -sd ' ' -)
  die "no components are pinned for Kubernetes $minor in $manifest; it pins: ${known:-nothing}"
fi
patch=$(ballast_patch "$version")
if [ -n "$patch" ] && [ "$patch" != "$pinned" ]; then
  die "Kubernetes $version: $manifest pins $pinned for $minor; bake $pinned, or pin $version in the manifest"
fi
ballast_components "$work/flat" "$minor" > "$work/components"
ballast_files "$work/flat" "$minor" > "$work/files"
ballast_addon_images "$work/flat" "$minor" > "$work/addon-images"
ballast_addon_manifests "$work/flat" "$minor" > "$work/addon-manifests"
arch=$(ballast_arch "$work/flat")

if [ "$print_plan" = 1 ]; then
  printf 'kubernetes|%s|%s\n' "$minor" "$pinned"
  cat "$work/components"
  sed 's/^/file|/' "$work/files"
  sed 's/^/addon-image|/' "$work/addon-images"
  sed 's/^/addon-manifest|/' "$work/addon-manifests"
  exit 0
fi

[ -n "$nodeup" ] || die "--nodeup is required: the nodeup binary to bake in"
[ -f "$nodeup" ] || die "no nodeup binary at $nodeup"
[ -d "$root" ] || die "the root $root is not a directory"
root=$(cd "$root" && pwd)
[ "$root" = / ] && root=
units=$here/systemd

# 1. Check everything before writing anything under the root. Every problem is collected and listed.
: > "$work/problems"
problem() { printf '  - %s\n' "$*" >> "$work/problems"; }

# nodeup's AWS SDK builds its HTTPS client from the system's CA certificates and will not start without them
# (even towards an http:// endpoint). The bases packer/README.md names carry them; a minimal root may not.
trust_store=
for candidate in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
  [ -s "${root}$candidate" ] && trust_store=$candidate
done
[ -n "$trust_store" ] || problem "CA certificates: ${root:-/} has no trust store (/etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt or /etc/ssl/cert.pem): install ca-certificates in the base image; nodeup cannot start without one"
# containerd copies the host's /etc/hosts into every pod, and the CNI plugins' masquerade (kubenet's bridge,
# portmap) runs iptables: a cloud image of Debian, Ubuntu or Amazon Linux has both, a minimal root may not.
[ -f "${root}/etc/hosts" ] || problem "/etc/hosts: ${root:-/} has none: install netbase in the base image (containerd copies it into every pod, and no pod starts without it)"
iptables_found=
for candidate in /usr/sbin/iptables /sbin/iptables /usr/bin/iptables; do
  # Debian's is a link through /etc/alternatives, absolute: it resolves only inside the root, so a link counts.
  if [ -e "${root}$candidate" ] || [ -L "${root}$candidate" ]; then iptables_found=$candidate; fi
done
[ -n "$iptables_found" ] || problem "iptables: ${root:-/} has none (/usr/sbin/iptables): install iptables in the base image (the CNI plugins masquerade pod traffic with it)"

# Stages the pinned add-on images ($work/images-pinned: addon|image|reference|digest|kind) in a containerd store under
# $work, with the containerd and ctr of the verified containerd artifact: the binaries that will read that store
# on every node. Each image ends up named as the kubelet asks for it, REPOSITORY@DIGEST and REPOSITORY:TAG, in
# namespace k8s.io, with all its content for linux/ARCH, stored but not unpacked (containerd unpacks it from the
# store when a pod first runs it). Step 2 moves the store to the image's /var/lib/containerd.
stage_images() {
  if [ -d "$root/var/lib/containerd" ] && [ -n "$(ls -A "$root/var/lib/containerd")" ]; then
    problem "add-on images: ${root:-}/var/lib/containerd already holds a containerd store, and install.sh merges into none: bake from a base image without /var/lib/containerd"
    return 0
  fi
  if [ ! -d "$work/unpacked/containerd" ]; then
    problem "add-on images: not staged: they need containerd's artifact, which is not verified (see containerd above)"
    return 0
  fi
  containerd_from=$(ballast_containerd_tool "$work/files" containerd | cut -d '|' -f 1)
  ctr_from=$(ballast_containerd_tool "$work/files" ctr | cut -d '|' -f 1)
  if [ -z "$containerd_from" ] || [ -z "$ctr_from" ]; then
    problem "add-on images: not staged: containerd's files must install both .../bin/containerd and .../bin/ctr (install.sh runs them to bake the images)"
    return 0
  fi
  if ! ballast_containerd_start "$work/unpacked/containerd/$containerd_from" "$work/unpacked/containerd/$ctr_from" \
    "$work/containerd/root" "$work/containerd"; then
    problem "add-on images: not staged: containerd ($containerd_from of containerd's artifact) did not start: $(tail -n 3 "$work/containerd/containerd.log" | tr '\n' ' ')"
    return 0
  fi
  platform=linux/$arch
  # ctr 1.7 and later import through the transfer service unless told --local; 1.6 knows only the local way.
  local_import=
  if ballast_ctr images import --help 2>&1 | grep -q -- '--local'; then local_import=--local; fi
  # ctr 2.x tags through the transfer service too, unless told --local (the staging containerd runs none).
  local_tag=
  if ballast_ctr images tag --help 2>&1 | grep -q -- '--local'; then local_tag=--local; fi
  mkdir -p "$work/images"
  n=0
  while IFS='|' read -r addon image reference digest kind; do
    n=$((n + 1))
    at="add-on $addon: image $reference"
    by_digest=${reference%:*}@$digest
    if [ "$source" = upstream ]; then
      # By digest: containerd checks every blob it fetches against the digest that names it.
      if ! out=$(ballast_ctr content fetch --platform "$platform" "$by_digest" 2>&1); then
        problem "$at: cannot pull $by_digest: $(printf '%s' "$out" | tail -n 1)"
        continue
      fi
    else
      file=$(ballast_image_archive "$reference")
      archive=$work/images/$file
      case $source in
        http://* | https://*)
          from=${source%/}/$file
          curl -fsSL --retry 3 --connect-timeout 20 -o "$archive" "$from" < /dev/null || { problem "$at: cannot download its archive $from"; continue; }
          ;;
        *)
          from=$source/$file
          [ -f "$from" ] || { problem "$at: its archive $file is not in $source (an OCI image layout tar of $by_digest: images/README.md)"; continue; }
          cp "$from" "$archive"
          ;;
      esac
      # Imported under a name of its own, so what this archive holds is known by name: base@DIGEST for each
      # image its index.json lists. containerd checks each blob against the digest that names it.
      base=import.ballast.invalid/image$n
      if ! out=$(ballast_ctr images import $local_import --no-unpack --digests --base-name "$base" --platform "$platform" "$archive" 2>&1); then
        problem "$at: cannot import $file (from $from): $(printf '%s' "$out" | tail -n 1)"
        continue
      fi
      ballast_ctr images ls > "$work/images.ls" || { problem "$at: ctr images ls failed after importing $file"; continue; }
      awk -v base="$base" 'index($1, base ":") == 1 || index($1, base "@") == 1 { print $1 }' "$work/images.ls" > "$work/imported"
      held=$(awk -v base="$base@" 'index($1, base) == 1 { print $3 }' "$work/images.ls" | sort -u | paste -sd ' ' -)
      if grep -qxF "$base@$digest" "$work/imported"; then
        ballast_ctr images tag $local_tag --force "$base@$digest" "$by_digest" > /dev/null || problem "$at: cannot name it $by_digest"
      else
        problem "$at: $file (from $from) holds ${held:-no image}, the manifest pins $digest: refusing it (the archive must hold the registry's own index or manifest, unconverted)"
      fi
      while IFS= read -r name; do ballast_ctr images rm "$name" > /dev/null || problem "$at: cannot remove the import's name $name"; done < "$work/imported"
      grep -qxF "$base@$digest" "$work/imported" || continue
    fi
    ballast_ctr images tag $local_tag --force "$by_digest" "$reference" > /dev/null || problem "$at: cannot name it $reference"
    # Both names, the content complete for this architecture, and kept from the kubelet's image garbage
    # collection (containerd 1.7 and later honour the label; 1.6 ignores it).
    ballast_ctr images ls > "$work/images.ls" || { problem "$at: ctr images ls failed"; continue; }
    for name in "$by_digest" "$reference"; do
      have=$(ballast_image_digest "$work/images.ls" "$name")
      [ "$have" = "$digest" ] || problem "$at: containerd holds $name as ${have:-nothing}, not $digest"
      ballast_ctr images label "$name" io.cri-containerd.pinned=pinned > /dev/null || problem "$at: cannot label $name pinned"
    done
    # What the digest names must be what the manifest says it is: an index pinned as an index (checked as the
    # index's own digest, its platform's manifest found through it), never a platform's manifest standing in.
    type=$(ballast_image_type "$work/images.ls" "$by_digest")
    [ "$(ballast_media_kind "$type")" = "$kind" ] ||
      problem "$at: the manifest pins $digest as an image $kind (digestKind), but it names ${type:-nothing}: refusing it (pin the registry's own $kind digest, or correct digestKind)"
    ballast_image_has_platform "$work/images.ls" "$by_digest" "$platform" ||
      problem "$at: $by_digest has no $platform image: $(ballast_image_row "$work/images.ls" "$by_digest")"
    # Its unpacked column is not what matters (nothing is unpacked): native is a snapshotter this one has.
    ballast_ctr images check --snapshotter native > "$work/images.check" || problem "$at: ctr images check failed"
    status=$(awk -v name="$by_digest" '$1 == name { print $4, $5; exit }' "$work/images.check")
    case $status in
      "complete "*) ;;
      *) problem "$at: content is missing for $platform: ctr images check says ${status:-nothing} (an archive must hold every blob of that platform)" ;;
    esac
  done < "$work/images-pinned"
  ballast_containerd_stop
  # containerd makes a new one on each node's first start; one baked in would be every node's.
  rm -f "$work/containerd/root/io.containerd.grpc.v1.introspection/uuid"
}

for want in containerd runc kubelet kubectl cni-plugins crictl etcd; do
  grep -q "^$want|" "$work/components" || problem "$want: not in the manifest for $minor"
done
for unit in nodeup.service containerd.service kubelet.service; do
  [ -f "$units/$unit" ] || problem "$unit: missing from $units"
done
mkdir -p "$work/download" "$work/unpacked"
while IFS='|' read -r name cversion url sha archive _; do
  if [ -z "$cversion" ] || [ -z "$url" ] || [ -z "$archive" ]; then
    problem "$name: version, url and archive are required"
    continue
  fi
  if [ "$sha" = unpinned ] || [ -z "$sha" ]; then
    problem "$name $cversion: sha256 is ${sha:-missing}: refusing an unverified artifact (run images/pin.sh, see images/README.md)"
    continue
  fi
  ballast_is_sha256 "$sha" || { problem "$name $cversion: sha256 \"$sha\" is not 64 lowercase hex digits"; continue; }
  file=${url##*/}
  dest=$work/download/$name-$file
  case $source in
    upstream | http://* | https://*)
      from=$url
      [ "$source" = upstream ] || from=${source%/}/$file
      command -v curl > /dev/null 2>&1 || { problem "$name: curl is needed to download $from"; continue; }
      curl -fsSL --retry 3 --connect-timeout 20 -o "$dest" "$from" < /dev/null || { problem "$name: cannot download $from"; continue; }
      ;;
    *)
      from=$source/$file
      [ -f "$from" ] || { problem "$name: $file is not in $source"; continue; }
      cp "$from" "$dest"
      ;;
  esac
  actual=$(ballast_sha256 "$dest")
  if [ "$actual" != "$sha" ]; then
    problem "$name $cversion: sha256 mismatch for $file (from $from): expected $sha, got $actual"
    continue
  fi
  out=$work/unpacked/$name
  mkdir -p "$out"
  case $archive in
    binary) cp "$dest" "$out/$file" ;;
    tar.gz) tar -xzf "$dest" -C "$out" --no-same-owner < /dev/null || problem "$name: cannot unpack $file" ;;
    *) problem "$name: unknown archive kind \"$archive\" (binary or tar.gz)" ;;
  esac
  printf '%s\n' "$actual" > "$work/unpacked/$name.sha256"
done < "$work/components"
# The add-ons (docs/addons.md): every image and CNI manifest pinned, each manifest downloaded and verified, each
# image put into a containerd store of its own here (staged), by digest, checked, and moved to the image's
# /var/lib/containerd in step 2.
: > "$work/images-pinned"
while IFS='|' read -r addon image reference digest kind; do
  case $digest in
    sha256:*)
      if ! ballast_is_sha256 "${digest#sha256:}"; then
        problem "add-on $addon: image $image digest \"$digest\" is not sha256:<64 hex>"
      elif [ "$kind" != index ] && [ "$kind" != manifest ]; then
        problem "add-on $addon: image $reference digestKind is \"${kind:-missing}\": say what its digest names, index (a multi-platform image's index) or manifest (one platform's image)"
      else
        printf '%s|%s|%s|%s|%s\n' "$addon" "$image" "$reference" "$digest" "$kind" >> "$work/images-pinned"
      fi
      ;;
    *) problem "add-on $addon: image $reference digest is ${digest:-missing}: refusing an unpinned image (no public record pins it, the manifest's reason says why; images/pin.sh pins it on a machine with internet)" ;;
  esac
done < "$work/addon-images"
# The local cloud's images (--images): made on this machine by tools/build-go, each a single-platform image
# pinned by its manifest's digest, and baked exactly as an add-on's image is.
if [ -n "$local_images" ]; then
  if [ ! -f "$local_images" ]; then
    problem "--images: no image manifest at $local_images (tools/build-go --dir images names the directory of images.yaml)"
  elif [ ! -d "$source" ]; then
    problem "--images: the local cloud's images are OCI archives on this machine: give --source DIR holding them, not $source"
  else
    awk '
      /^images:[[:space:]]*$/ { inside = 1; next }
      inside && /^  [^ #][^ ]*:[[:space:]]*$/ { reference = $1; sub(/:$/, "", reference); next }
      inside && /^    digest: / && reference != "" { print reference "|" $2; reference = "" }
    ' "$local_images" > "$work/local-images"
    [ -s "$work/local-images" ] || problem "--images: $local_images lists no image (reference:, then digest: sha256:...)"
    while IFS='|' read -r reference digest; do
      image=${reference%:*}
      image=${image##*/}
      if ballast_is_sha256 "${digest#sha256:}" && [ "${digest%%:*}" = sha256 ]; then
        printf 'local-cloud|%s|%s|%s|manifest\n' "$image" "$reference" "$digest" >> "$work/images-pinned"
      else
        problem "--images: $reference: digest \"$digest\" is not sha256:<64 hex> ($local_images)"
      fi
    done < "$work/local-images"
  fi
fi
if [ -s "$work/images-pinned" ]; then
  stage_images
fi
mkdir -p "$work/addons"
while IFS='|' read -r addon url sha format; do
  if [ "$format" = helm-chart ]; then
    problem "add-on $addon: its manifest $url is a Helm chart, and install.sh does not render Helm charts (not built: no helm in this recipe), so no release pinning it as format helm-chart can be baked (docs/addons.md)"
    continue
  fi
  if [ "$sha" = unpinned ] || ! ballast_is_sha256 "$sha"; then
    problem "add-on $addon: manifest sha256 is ${sha:-missing}: refusing an unverified manifest (pin its sha256 in the manifest; images/pin.sh pins it on a machine with internet)"
    continue
  fi
  file=${url##*/}
  dest=$work/addons/$addon.yaml
  case $source in
    upstream | http://* | https://*)
      from=$url
      [ "$source" = upstream ] || from=${source%/}/$file
      curl -fsSL --retry 3 --connect-timeout 20 -o "$dest" "$from" < /dev/null || { problem "add-on $addon: cannot download $from"; continue; }
      ;;
    *)
      from=$source/$file
      [ -f "$from" ] || { problem "add-on $addon: $file is not in $source"; continue; }
      cp "$from" "$dest"
      ;;
  esac
  actual=$(ballast_sha256 "$dest")
  [ "$actual" = "$sha" ] || problem "add-on $addon: manifest sha256 mismatch for $file (from $from): expected $sha, got $actual"
done < "$work/addon-manifests"
while IFS='|' read -r name from to; do
  [ -d "$work/unpacked/$name" ] || continue # already reported
  src=$work/unpacked/$name/$from
  if [ ! -f "$src" ] || [ -L "$src" ]; then
    problem "$name: $from is not a regular file in its artifact"
  fi
  case $to in /*) ;; *) problem "$name: install path $to is not absolute" ;; esac
done < "$work/files"
if [ -s "$work/problems" ]; then
  {
    printf 'install.sh: refusing to bake Kubernetes %s; nothing was installed under %s:\n' "$minor" "${root:-/}"
    cat "$work/problems"
  } >&2
  exit 1
fi

# 2. Install. From here on, a failure leaves a partial image: the bake as a whole has failed.
echo "install.sh: every artifact verified; installing into ${root:-/}" >&2
record=$work/components.yaml
{
  echo "# Written by images/install.sh when this image was baked; read by nodeup and images/verify.sh."
  echo "apiVersion: ballast.dev/v1alpha1"
  echo "kind: ImageComponents"
  printf 'kubernetesMinor: "%s"\n' "$minor"
  printf 'kubernetes: "%s"\n' "$pinned"
  printf 'manifestSha256: "%s"\n' "$(ballast_sha256 "$manifest")"
  printf 'bakedAt: "%s"\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nodeup:"
  echo '  path: "/usr/local/bin/nodeup"'
  printf '  sha256: "%s"\n' "$(ballast_sha256 "$nodeup")"
  echo "components:"
} > "$record"
while IFS='|' read -r name cversion _ _ _ _; do
  printf '  %s:\n    version: "%s"\n    sha256: "%s"\n' "$name" "$cversion" "$(cat "$work/unpacked/$name.sha256")" >> "$record"
  # An artifact built from source (tools/build-go) rather than the release's own: said so, for nodeup.
  built_by=$(ballast_pinned_by "$work/flat" "$minor" "$name")
  [ "$built_by" = tools/build-go ] && printf '    builtBy: "%s"\n' "$built_by" >> "$record"
  echo '    files:' >> "$record"
  while IFS='|' read -r fname from to; do
    [ "$fname" = "$name" ] || continue
    install -D -m 0755 "$work/unpacked/$name/$from" "$root$to"
    printf '      "%s": "%s"\n' "$to" "$(ballast_sha256 "$root$to")" >> "$record"
    echo "  $name $cversion: $to" >&2
  done < "$work/files"
done < "$work/components"
# The images baked into containerd's store, each under the digest checked in step 1: nodeup names the sandbox
# image by it (an add-on's is its pin; the local cloud's, built here, its own).
if [ -s "$work/images-pinned" ]; then
  echo "images:" >> "$record"
  awk -F'|' '!seen[$3]++ { printf "  \"%s\": \"%s\"\n", $3, $4 }' "$work/images-pinned" >> "$record"
fi
install -D -m 0755 "$nodeup" "$root/usr/local/bin/nodeup"
echo "  nodeup: /usr/local/bin/nodeup" >&2

for unit in nodeup.service containerd.service kubelet.service; do
  install -D -m 0644 "$units/$unit" "$root/etc/systemd/system/$unit"
done
for f in etc/sysctl.d/99-ballast-kubernetes.conf etc/modules-load.d/ballast-kubernetes.conf etc/crictl.yaml; do
  install -D -m 0644 "$here/rootfs/$f" "$root/$f"
done
mkdir -p "$root/etc/ballast" "$root/etc/cni/net.d" "$root/opt/cni/bin" "$root/var/lib/kubelet"
install -m 0644 "$record" "$root/etc/ballast/components.yaml"
# The CNI manifests nodeup applies on control-plane nodes (nodeup/src/addons/), verified above.
for manifest in "$work"/addons/*.yaml; do
  [ -f "$manifest" ] || continue
  install -D -m 0644 "$manifest" "$root/etc/ballast/addons/${manifest##*/}"
done
# The add-on images, staged and checked in step 1: the whole store becomes the image's.
if [ -s "$work/images-pinned" ]; then
  mkdir -p "$root/var/lib"
  if [ -d "$root/var/lib/containerd" ]; then rmdir "$root/var/lib/containerd"; fi # empty: checked in step 1
  mv "$work/containerd/root" "$root/var/lib/containerd"
  while IFS='|' read -r addon _ reference digest _; do
    echo "  add-on $addon: ${reference%:*}@$digest and $reference in /var/lib/containerd (namespace k8s.io)" >&2
  done < "$work/images-pinned"
fi
# --root works without a running systemd (a chroot, a DESTDIR) and on the build VM alike.
systemctl --root="${root:-/}" enable nodeup.service containerd.service kubelet.service

# 3. Clean the image: nothing that identifies the build instance or its session may reach every node.
rm -f "$root"/etc/ssh/ssh_host_*
# An empty machine-id: systemd makes a fresh one on each instance's first boot.
: > "$root/etc/machine-id"
chmod 0444 "$root/etc/machine-id"
if [ -f "$root/var/lib/dbus/machine-id" ] && [ ! -L "$root/var/lib/dbus/machine-id" ]; then
  rm -f "$root/var/lib/dbus/machine-id"
fi
rm -f "$root/var/lib/systemd/random-seed" "$root/var/lib/systemd/credential.secret"
if [ -d "$root/var/lib/cloud" ]; then
  find "$root/var/lib/cloud" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
fi
if [ -d "$root/var/log" ]; then
  find "$root/var/log" -type f \( -name '*.gz' -o -name '*.xz' -o -name '*.[0-9]' -o -name '*.old' \) -exec rm -f {} +
  find "$root/var/log" -type f -exec truncate -s 0 {} +
  if [ -d "$root/var/log/journal" ]; then
    find "$root/var/log/journal" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  fi
fi
for home in "$root/root" "$root"/home/*; do
  [ -d "$home" ] || continue
  rm -f "$home"/.*_history "$home/.lesshst" "$home/.viminfo"
done
rm -rf "$root"/var/cache/apt/archives/*.deb

echo "install.sh: baked Kubernetes $pinned (components from $source) into ${root:-/}" >&2
