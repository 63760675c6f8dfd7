#!/bin/sh
# Bakes Ballast's node contents into a root filesystem: the components pinned in images/manifest.yaml for one
# Kubernetes minor version, nodeup, their systemd units, the sysctls and kernel modules Kubernetes needs; then
# cleans the image (SSH host keys, machine-id, cloud-init state, logs, shell history).
#
# Every artifact's sha256 is checked, and every file to install found, BEFORE anything is written under the
# root: an unpinned or mismatching artifact stops the bake with nothing installed.
#
# Usage: install.sh --manifest FILE --kubernetes-version VERSION --nodeup FILE [--source SOURCE] [--root DIR]
#        install.sh --manifest FILE --kubernetes-version VERSION --print-plan
#   --manifest FILE             the component manifest (env BALLAST_MANIFEST; default: manifest.yaml beside this)
#   --kubernetes-version V      1.33 or 1.33.4; a patch must be the one the manifest pins (env BALLAST_KUBERNETES_VERSION)
#   --source SOURCE             where artifacts come from (env BALLAST_ARTIFACTS; default upstream):
#                                 upstream        each component's URL
#                                 DIR             a local directory holding each URL's file name (offline builds)
#                                 https://MIRROR  MIRROR/<the URL's file name>
#   --nodeup FILE               the nodeup binary to bake in (env BALLAST_NODEUP)
#   --root DIR                  the image's root (env BALLAST_ROOT; default /): a chroot, a DESTDIR, or the build VM
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
print_plan=0

die() {
  printf 'install.sh: %s\n' "$*" >&2
  exit 1
}
usage() {
  sed -n '9,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --manifest) [ $# -ge 2 ] || usage; manifest=$2; shift 2 ;;
    --kubernetes-version) [ $# -ge 2 ] || usage; version=$2; shift 2 ;;
    --source) [ $# -ge 2 ] || usage; source=$2; shift 2 ;;
    --nodeup) [ $# -ge 2 ] || usage; nodeup=$2; shift 2 ;;
    --root) [ $# -ge 2 ] || usage; root=$2; shift 2 ;;
    --print-plan) print_plan=1; shift ;;
    -h | --help) usage ;;
    *) printf 'install.sh: unknown argument %s\n' "$1" >&2; usage ;;
  esac
done

[ -n "$version" ] || die "--kubernetes-version is required (e.g. 1.33)"
[ -f "$manifest" ] || die "no manifest at $manifest"
minor=$(ballast_minor "$version") || die "$version is not a Kubernetes version: expected 1.33 or 1.33.4"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/ballast-install.XXXXXX")
cleanup() { rm -rf "$work"; }
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
# The add-ons (docs/addons.md): every image and CNI manifest pinned, each manifest downloaded and verified.
while IFS='|' read -r addon image reference digest; do
  case $digest in
    sha256:*) ballast_is_sha256 "${digest#sha256:}" || problem "add-on $addon: image $image digest \"$digest\" is not sha256:<64 hex>" ;;
    *) problem "add-on $addon: image $reference digest is ${digest:-missing}: refusing an unpinned image (pin its digest in the manifest: images/pin.sh does not pin add-ons yet)" ;;
  esac
done < "$work/addon-images"
if [ -s "$work/addon-images" ]; then
  # Pulling the pinned images into the image's containerd store (ctr images pull by digest on the build VM) is
  # not built yet; without it pods would pull at boot, which Ballast does not do.
  problem "add-on images: baking them into containerd's image store is not built yet (docs/addons.md)"
fi
mkdir -p "$work/addons"
while IFS='|' read -r addon url sha format; do
  if [ "$format" = helm-chart ]; then
    problem "add-on $addon: its manifest is a Helm chart; rendering it at bake time is not built yet (docs/addons.md)"
    continue
  fi
  if [ "$sha" = unpinned ] || ! ballast_is_sha256 "$sha"; then
    problem "add-on $addon: manifest sha256 is ${sha:-missing}: refusing an unverified manifest (pin its sha256 in the manifest: images/pin.sh does not pin add-ons yet)"
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
  printf '  %s:\n    version: "%s"\n    sha256: "%s"\n    files:\n' "$name" "$cversion" "$(cat "$work/unpacked/$name.sha256")" >> "$record"
  while IFS='|' read -r fname from to; do
    [ "$fname" = "$name" ] || continue
    install -D -m 0755 "$work/unpacked/$name/$from" "$root$to"
    printf '      "%s": "%s"\n' "$to" "$(ballast_sha256 "$root$to")" >> "$record"
    echo "  $name $cversion: $to" >&2
  done < "$work/files"
done < "$work/components"
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
