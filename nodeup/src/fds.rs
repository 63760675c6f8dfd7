//! nodeup's file-descriptor budget. systemd starts services with a soft RLIMIT_NOFILE of 1024 (and a hard one of
//! 524288 on current systemd): nodeup holds the etcd supervisor's connections, the state store's and AWS
//! clients', its children's pipes and logs, and the node bootstrap service's connections in one process, so at
//! start it raises its soft limit to the hard one ([`raise_nofile_limit`]), and the bootstrap service keeps its
//! connection caps well below what is left ([`crate::bootstrap::server::Limits::within_fd_limit`]). Issue 28,
//! high 4: 1,100 idle connections to the bootstrap service exhausted the 1024 and the etcd supervisor could no
//! longer read the state store.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The soft and hard RLIMIT_NOFILE before and the soft one after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft_before: u64,
    pub hard: u64,
    pub soft: u64,
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (no privilege needed), logs what it did, and
/// returns the limits. When it cannot (a limit nodeup cannot read or set), it logs why and returns what is in
/// force: nodeup goes on, and the bootstrap service's caps are fitted to that.
pub fn raise_nofile_limit() -> Option<NofileLimit> {
    let (soft_before, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!(error = %e, "reading nodeup's file-descriptor limit (RLIMIT_NOFILE); the node bootstrap service keeps its default caps");
            return None;
        }
    };
    if soft_before >= hard {
        tracing::info!(
            soft = soft_before,
            hard,
            "nodeup's file-descriptor limit is already its hard limit"
        );
        return Some(NofileLimit {
            soft_before,
            hard,
            soft: soft_before,
        });
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::info!(
                from = soft_before,
                to = hard,
                "raised nodeup's file-descriptor limit (RLIMIT_NOFILE soft) to its hard limit"
            );
            Some(NofileLimit {
                soft_before,
                hard,
                soft: hard,
            })
        }
        Err(e) => {
            tracing::warn!(
                soft = soft_before,
                hard,
                error = %e,
                "could not raise nodeup's file-descriptor limit (RLIMIT_NOFILE); the node bootstrap service's caps are fitted to the soft limit"
            );
            Some(NofileLimit {
                soft_before,
                hard,
                soft: soft_before,
            })
        }
    }
}

/// The soft RLIMIT_NOFILE in force now.
pub fn soft_nofile_limit() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lowers this test process's soft limit (as systemd's 1024 would be), then raises it back: nodeup's call
    /// brings the soft limit up to the hard one. The process's own limit is shared by every test in it, so this
    /// test only ever ends with the soft limit at the hard one, where the others expect plenty.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        let lowered = hard.min(1024);
        setrlimit(Resource::RLIMIT_NOFILE, lowered, hard).expect("lowering the soft limit");
        let raised = raise_nofile_limit().expect("the limits");
        assert_eq!(raised.soft_before, lowered);
        assert_eq!(raised.soft, hard);
        assert_eq!(soft_nofile_limit(), Some(hard));
    }
}
