#!/bin/sh
# Checks a baked image against its contract and lists everything that is wrong (exit 1), or says it is fine:
#   - every component the manifest pins for the Kubernetes version is recorded in /etc/ballast/components.yaml
#     at that version and artifact sha256, each installed file is there, executable, with its recorded sha256,
#     and its versionCommand prints the version; nodeup likewise;
#   - every add-on image the manifest pins is in the image's containerd store (/var/lib/containerd, namespace
#     k8s.io) by digest and by tag with the pinned digest, of the kind it says (digestKind: an index or one
#     manifest), its content complete for the image's architecture,
#     every blob of the store matching its digest (read by the image's containerd, on a copy of the store);
#   - nodeup.service, containerd.service and kubelet.service are valid (`systemd-analyze verify`, where any
#     output counts as a problem) and enabled;
#   - the sysctls and kernel modules Kubernetes needs are configured;
#   - hygiene: no SSH host keys, an empty machine-id, no random seed, no cloud-init state, no log content, no
#     shell history, no containerd instance id, no leftovers of install.sh.
#
# Usage: verify.sh --manifest FILE --kubernetes-version VERSION [--root DIR]
#   (env BALLAST_MANIFEST, BALLAST_KUBERNETES_VERSION, BALLAST_ROOT; root defaults to /)
# With --root other than /, version commands run through chroot(8).
# shellcheck source-path=SCRIPTDIR
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

manifest=${BALLAST_MANIFEST:-$here/manifest.yaml}
version=${BALLAST_KUBERNETES_VERSION:-}
root=${BALLAST_ROOT:-/}

die() {
  printf 'verify.sh: %s\n' "$*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --manifest) [ $# -ge 2 ] || die "--manifest needs a value"; manifest=$2; shift 2 ;;
    --kubernetes-version) [ $# -ge 2 ] || die "--kubernetes-version needs a value"; version=$2; shift 2 ;;
    --root) [ $# -ge 2 ] || die "--root needs a value"; root=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
[ -n "$version" ] || die "--kubernetes-version is required"
[ -f "$manifest" ] || die "no manifest at $manifest"
[ -d "$root" ] || die "the root $root is not a directory"
root=$(cd "$root" && pwd)
[ "$root" = / ] && root=
minor=$(ballast_minor "$version") || die "$version is not a Kubernetes version"

work=$(mktemp -d "${TMPDIR:-/tmp}/ballast-verify.XXXXXX")
cleanup() {
  ballast_containerd_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

: > "$work/problems"
problem() { printf '  - %s\n' "$*" >> "$work/problems"; }

# Runs a command of the image (through chroot when the image is not /), output on stdout.
in_image() {
  if [ -z "$root" ]; then
    "$@" < /dev/null 2>&1
  else
    chroot "$root" "$@" < /dev/null 2>&1
  fi
}

ballast_flatten "$manifest" > "$work/flat" || die "cannot read $manifest (see above)"
pinned=$(ballast_releases "$work/flat" | awk -v m="$minor" '$1 == m { print $2 }')
[ -n "$pinned" ] || die "no components are pinned for Kubernetes $minor in $manifest"
ballast_components "$work/flat" "$minor" > "$work/components"
ballast_files "$work/flat" "$minor" > "$work/files"

# 1. Components, against the record and the files themselves.
record=$root/etc/ballast/components.yaml
if [ ! -f "$record" ]; then
  problem "/etc/ballast/components.yaml is missing: the image was not baked by install.sh"
  : > "$work/record"
elif ! ballast_flatten "$record" > "$work/record" 2> "$work/record.err"; then
  problem "/etc/ballast/components.yaml cannot be read: $(cat "$work/record.err")"
fi
recorded() { # recorded KEY...: the record's value at that path
  awk -F '\t' -v want="$(printf '%s\t' "$@")" '
    { value = $NF; path = ""; for (i = 1; i < NF; i++) path = path $i "\t" }
    path == want { print value; exit }
  ' "$work/record"
}
[ ! -s "$work/record" ] || [ "$(recorded kubernetes)" = "$pinned" ] ||
  problem "the image was baked for Kubernetes $(recorded kubernetes), the manifest pins $pinned"
while IFS='|' read -r name cversion _ sha _ vcommand; do
  [ -s "$work/record" ] || break
  have=$(recorded components "$name" version)
  if [ -z "$have" ]; then
    problem "$name: not in /etc/ballast/components.yaml"
    continue
  fi
  [ "$have" = "$cversion" ] || problem "$name: the image has $have, the manifest pins $cversion"
  have_sha=$(recorded components "$name" sha256)
  [ "$have_sha" = "$sha" ] || problem "$name: the image's artifact has sha256 $have_sha, the manifest pins $sha"
  while IFS='|' read -r fname _ to; do
    [ "$fname" = "$name" ] || continue
    if [ ! -f "$root$to" ]; then
      problem "$name: $to is missing"
      continue
    fi
    [ -x "$root$to" ] || problem "$name: $to is not executable"
    want=$(recorded components "$name" files "$to")
    actual=$(ballast_sha256 "$root$to")
    [ "$actual" = "$want" ] || problem "$name: $to has sha256 $actual, recorded ${want:-nothing} at bake time"
  done < "$work/files"
  if [ -n "$vcommand" ]; then
    # The command is split into words on purpose: "/usr/local/bin/kubelet --version".
    # shellcheck disable=SC2086
    if ! out=$(in_image $vcommand); then
      problem "$name: \`$vcommand\` failed: $(printf '%s' "$out" | head -n 3)"
    elif ! printf '%s\n' "$out" | grep -qF -- "$cversion"; then
      problem "$name: \`$vcommand\` does not print $cversion: $(printf '%s' "$out" | head -n 3)"
    fi
  fi
done < "$work/components"
if [ ! -x "$root/usr/local/bin/nodeup" ]; then
  problem "nodeup: /usr/local/bin/nodeup is missing or not executable"
elif [ -s "$work/record" ]; then
  want=$(recorded nodeup sha256)
  actual=$(ballast_sha256 "$root/usr/local/bin/nodeup")
  [ "$actual" = "$want" ] || problem "nodeup: /usr/local/bin/nodeup has sha256 $actual, recorded ${want:-nothing} at bake time"
fi

# 2. The add-on images: each one the manifest pins in the image's containerd store, namespace k8s.io, named by
#    digest and by tag with the pinned digest, its content complete for the image's architecture; every blob of
#    the store matching its digest. Read by the image's own containerd, started on a copy of the store so that
#    reading it changes nothing in the image.
ballast_addon_images "$work/flat" "$minor" > "$work/addon-images"
store=$root/var/lib/containerd
: > "$work/images-pinned"
while IFS='|' read -r addon _ reference digest kind; do
  case $digest in
    sha256:*) printf '%s|%s|%s|%s\n' "$addon" "$reference" "$digest" "$kind" >> "$work/images-pinned" ;;
    *) problem "add-on $addon: image $reference: its digest is ${digest:-missing} in the manifest, so no image can hold it" ;;
  esac
done < "$work/addon-images"
if [ -s "$work/images-pinned" ]; then
  containerd_to=$(ballast_containerd_tool "$work/files" containerd | cut -d '|' -f 2)
  ctr_to=$(ballast_containerd_tool "$work/files" ctr | cut -d '|' -f 2)
  if [ ! -d "$store/io.containerd.content.v1.content" ] || [ ! -f "$store/io.containerd.metadata.v1.bolt/meta.db" ]; then
    problem "add-on images: /var/lib/containerd holds no containerd store: the image was baked without its add-on images"
  elif [ -z "$containerd_to" ] || [ -z "$ctr_to" ] || [ ! -x "$root$containerd_to" ] || [ ! -x "$root$ctr_to" ]; then
    problem "add-on images: not checked: the image has no containerd and ctr where the manifest installs them"
  else
    for blob in "$store"/io.containerd.content.v1.content/blobs/sha256/*; do
      [ -f "$blob" ] || continue
      [ "$(ballast_sha256 "$blob")" = "${blob##*/}" ] ||
        problem "add-on images: the blob sha256:${blob##*/} in /var/lib/containerd does not match its digest"
    done
    cp -a "$store" "$work/store"
    if ! ballast_containerd_start "$root$containerd_to" "$root$ctr_to" "$work/store" "$work/containerd"; then
      problem "add-on images: not checked: the image's containerd did not start on a copy of /var/lib/containerd: $(tail -n 3 "$work/containerd/containerd.log" | tr '\n' ' ')"
    else
      ballast_ctr images ls > "$work/images.ls" 2>&1 || problem "add-on images: ctr images ls failed: $(head -n 3 "$work/images.ls")"
      ballast_ctr images check --snapshotter native > "$work/images.check" 2>&1 || problem "add-on images: ctr images check failed: $(head -n 3 "$work/images.check")"
      ballast_containerd_stop
      while IFS='|' read -r addon reference digest kind; do
        by_digest=${reference%:*}@$digest
        for name in "$by_digest" "$reference"; do
          have=$(ballast_image_digest "$work/images.ls" "$name")
          if [ -z "$have" ]; then
            problem "add-on $addon: image $name is not in the image's containerd store (/var/lib/containerd, namespace k8s.io): a node would pull it"
          elif [ "$have" != "$digest" ]; then
            problem "add-on $addon: the image's containerd store holds $name as $have, the manifest pins $digest"
          fi
        done
        [ -n "$(ballast_image_digest "$work/images.ls" "$by_digest")" ] || continue
        type=$(ballast_image_type "$work/images.ls" "$by_digest")
        [ "$(ballast_media_kind "$type")" = "$kind" ] ||
          problem "add-on $addon: image $by_digest is a ${type:-nothing}, the manifest pins an image $kind (digestKind)"
        ballast_image_has_platform "$work/images.ls" "$by_digest" "linux/$(ballast_arch "$work/flat")" ||
          problem "add-on $addon: image $by_digest has no linux/$(ballast_arch "$work/flat") image in the store"
        status=$(awk -v name="$by_digest" '$1 == name { print $4, $5; exit }' "$work/images.check")
        case $status in
          "complete "*) ;;
          *) problem "add-on $addon: image $by_digest: its content is not all in the store (ctr images check: ${status:-nothing})" ;;
        esac
      done < "$work/images-pinned"
    fi
  fi
fi

# 3. Units: valid, and enabled.
for unit in nodeup.service containerd.service kubelet.service; do
  if [ ! -f "$root/etc/systemd/system/$unit" ]; then
    problem "$unit: missing from /etc/systemd/system"
    continue
  fi
  if ! out=$(systemd-analyze --root="${root:-/}" verify "/etc/systemd/system/$unit" < /dev/null 2>&1) || [ -n "$out" ]; then
    problem "$unit: systemd-analyze verify: $(printf '%s' "$out" | tr '\n' ' ')"
  fi
  state=$(systemctl --root="${root:-/}" is-enabled "$unit" 2> /dev/null || true)
  [ "$state" = enabled ] || problem "$unit: ${state:-unknown}, not enabled"
done

# 4. What Kubernetes needs from the kernel: forwarding and bridged traffic for pods and Services, and the values
# the kubelet checks and refuses to start without (nodeup sets protectKernelDefaults).
sysctl_conf=$root/etc/sysctl.d/99-ballast-kubernetes.conf
for setting in net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 \
  vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1 \
  kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000; do
  name=${setting%%=*}
  value=${setting#*=}
  pattern=$(printf '%s' "$name" | sed 's/\./\\./g')
  grep -Eq "^[[:space:]]*${pattern}[[:space:]]*=[[:space:]]*${value}[[:space:]]*$" "$sysctl_conf" 2> /dev/null ||
    problem "sysctl $name = $value is not set in /etc/sysctl.d/99-ballast-kubernetes.conf"
done
for module in overlay br_netfilter; do
  grep -qx "$module" "$root/etc/modules-load.d/ballast-kubernetes.conf" 2> /dev/null ||
    problem "kernel module $module is not in /etc/modules-load.d/ballast-kubernetes.conf"
done

# 5. Hygiene: nothing of the build instance may reach every node.
for key in "$root"/etc/ssh/ssh_host_*; do
  if [ -e "$key" ]; then problem "SSH host key ${key#"$root"} is in the image"; fi
done
if [ ! -f "$root/etc/machine-id" ]; then
  problem "/etc/machine-id is missing (it must exist and be empty)"
elif [ -s "$root/etc/machine-id" ]; then
  problem "/etc/machine-id is not empty: every instance would share its machine id"
fi
if [ -f "$root/var/lib/dbus/machine-id" ] && [ ! -L "$root/var/lib/dbus/machine-id" ] && [ -s "$root/var/lib/dbus/machine-id" ]; then
  problem "/var/lib/dbus/machine-id is in the image"
fi
for f in /var/lib/systemd/random-seed /var/lib/systemd/credential.secret; do
  [ ! -e "$root$f" ] || problem "$f is in the image"
done
if [ -d "$root/var/lib/cloud" ]; then
  find "$root/var/lib/cloud" -mindepth 1 -maxdepth 1 > "$work/cloud"
  while IFS= read -r f; do problem "cloud-init state ${f#"$root"} is in the image"; done < "$work/cloud"
fi
if [ -d "$root/var/log" ]; then
  find "$root/var/log" -type f -size +0c > "$work/logs"
  while IFS= read -r f; do problem "log ${f#"$root"} is not empty"; done < "$work/logs"
fi
for home in "$root/root" "$root"/home/*; do
  for f in "$home"/.*_history "$home/.lesshst" "$home/.viminfo"; do
    if [ -e "$f" ]; then problem "shell history ${f#"$root"} is in the image"; fi
  done
done
[ ! -e "$store/io.containerd.grpc.v1.introspection/uuid" ] ||
  problem "/var/lib/containerd/io.containerd.grpc.v1.introspection/uuid is in the image: every node's containerd would share its id"
for f in "$root"/var/tmp/ballast-install.* "$root"/tmp/ballast-install.*; do
  if [ -e "$f" ]; then problem "install.sh left ${f#"$root"} behind"; fi
done

if [ -s "$work/problems" ]; then
  count=$(wc -l < "$work/problems" | tr -d ' ')
  {
    printf 'verify.sh: the image in %s does not meet its contract (%s problem(s)):\n' "${root:-/}" "$count"
    cat "$work/problems"
  } >&2
  exit 1
fi
echo "verify.sh: the image in ${root:-/} meets its contract for Kubernetes $pinned" >&2
