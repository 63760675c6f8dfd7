//! Each instance's own `/etc/hosts`, as on a real machine: nodeup (the same binary as on AWS) keeps the etcd peer
//! names in `<root>/etc/hosts`, and etcd (Go's resolver reads `/etc/hosts`) must resolve them per instance, since
//! the same name means another address in another local cloud running beside this one.
//!
//! So nodeup starts in a private mount namespace (`unshare(CLONE_NEWNS)`, which needs root, like the volume bind
//! mounts) in which `<root>/etc/hosts` is bind-mounted over `/etc/hosts`; nodeup's children (etcd) inherit it.
//! The host's `/etc/hosts` is never touched: the namespace's `/` is made private before the bind, so the bind
//! cannot propagate out.
//!
//! Volumes must still reach the instance after it started: the runner bind-mounts an attached volume under the
//! instance's root from its own namespace. The root is therefore made a *shared* mount (bound onto itself) before
//! nodeup starts; the namespace's copy of it is a peer, so the runner's later mounts under the root appear in the
//! instance, and nodeup's own mounts under the root (etcd's state directory on the volume) appear outside, where
//! the runner unmounts them at power-off as before (`volumes::unmount_all_under`, which also takes the root's own
//! bind away).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

/// What a fresh instance's `/etc/hosts` holds before nodeup adds to it.
const DEFAULT_HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";

/// The instance's hosts file, bind-mounted over `/etc/hosts` in its namespace.
pub fn hosts_file(root: &Path) -> PathBuf {
    root.join("etc/hosts")
}

/// Before nodeup starts: `<root>/etc/hosts` exists (a fresh machine's, kept across a stop and start) and the root
/// is a shared mount of itself (see the module docs).
pub fn prepare_instance_root(root: &Path) -> io::Result<()> {
    let hosts = hosts_file(root);
    if !hosts.exists() {
        if let Some(dir) = hosts.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&hosts, DEFAULT_HOSTS)?;
    }
    let canonical = std::fs::canonicalize(root)?;
    if !crate::volumes::mounts_under(root).contains(&canonical) {
        run(StdCommand::new("mount").arg("--bind").arg(root).arg(root))?;
    }
    run(StdCommand::new("mount").arg("--make-shared").arg(root))
}

fn run(cmd: &mut StdCommand) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Makes `cmd` start in its own mount namespace with `hosts` bind-mounted over `/etc/hosts`.
pub fn with_own_hosts(cmd: &mut StdCommand, hosts: &Path) -> io::Result<()> {
    let source = CString::new(hosts.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a hosts path with a NUL byte"))?;
    let target = c"/etc/hosts";
    let slash = c"/";
    // SAFETY: between fork and exec the closure only makes system calls (unshare, mount) on strings built before
    // the fork: it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Only `/` itself (not recursively): the instance root's shared bind stays a peer of the runner's.
            if libc::mount(
                std::ptr::null(),
                slash.as_ptr(),
                std::ptr::null(),
                libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // Where /etc/hosts is a mount of its own (a container's), it must not propagate either; elsewhere this
            // fails with EINVAL (not a mount point), which is fine.
            libc::mount(
                std::ptr::null(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_PRIVATE,
                std::ptr::null(),
            );
            if libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}
