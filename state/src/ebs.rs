//! EBS performance rules, pure: which volume types take provisioned IOPS and throughput, AWS's bounds on them
//! (`crate::limits`), and gp3's baseline, what AWS gives a gp3 volume for which none is set. Shared by the root
//! volume, etcd's member volumes and a group's extra volumes, so one rule holds for all three.

use crate::limits::{
    GP3_BASELINE_IOPS, GP3_BASELINE_THROUGHPUT_MIBS, GP3_IOPS, GP3_MAX_IOPS_PER_GIB,
    GP3_MAX_THROUGHPUT_PER_IOPS, GP3_THROUGHPUT_MIBS, IO1_IOPS, IO1_MAX_IOPS_PER_GIB, IO2_IOPS,
    IO2_MAX_IOPS_PER_GIB,
};

/// A volume's performance settings as the spec writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Performance<'a> {
    pub volume_type: &'a str,
    pub size_gib: u32,
    pub iops: Option<u32>,
    pub throughput: Option<u32>,
}

/// One problem with a volume's performance settings: the field it is about (`iops` or `throughput`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerformanceProblem {
    pub field: &'static str,
    pub message: String,
}

/// Every problem with these settings, by AWS's rules for the volume type: gp3 takes both (bounded, with at most
/// [`GP3_MAX_IOPS_PER_GIB`] IOPS per GiB above its baseline and at most [`GP3_MAX_THROUGHPUT_PER_IOPS`] MiB/s per
/// IOPS); io1 and io2 need IOPS (bounded, per GiB) and take no throughput; any other type takes neither.
pub fn check(volume: Performance<'_>) -> Vec<PerformanceProblem> {
    let mut problems = Vec::new();
    let mut problem =
        |field: &'static str, message: String| problems.push(PerformanceProblem { field, message });
    let per_gib = |iops: u32, max_per_gib: u32| -> Option<String> {
        let allowed = u64::from(volume.size_gib) * u64::from(max_per_gib);
        (u64::from(iops) > allowed).then(|| {
            format!(
                "{iops} IOPS is more than {max_per_gib} per GiB of a {} GiB {} volume allows ({allowed}): \
                 lower it or grow the volume",
                volume.size_gib, volume.volume_type
            )
        })
    };
    match volume.volume_type {
        "gp3" => {
            if let Some(iops) = volume.iops {
                if !GP3_IOPS.contains(&iops) {
                    problem(
                        "iops",
                        format!(
                            "{iops} is outside gp3's {}..{}",
                            GP3_IOPS.start(),
                            GP3_IOPS.end()
                        ),
                    );
                } else if iops > GP3_BASELINE_IOPS {
                    if let Some(message) = per_gib(iops, GP3_MAX_IOPS_PER_GIB) {
                        problem("iops", message);
                    }
                }
            }
            if let Some(throughput) = volume.throughput {
                if !GP3_THROUGHPUT_MIBS.contains(&throughput) {
                    problem(
                        "throughput",
                        format!(
                            "{throughput} MiB/s is outside gp3's {}..{}",
                            GP3_THROUGHPUT_MIBS.start(),
                            GP3_THROUGHPUT_MIBS.end()
                        ),
                    );
                } else {
                    let iops = volume.iops.unwrap_or(GP3_BASELINE_IOPS);
                    // Throughput may be at most a quarter MiB/s per provisioned IOPS (AWS's ratio for gp3).
                    if f64::from(throughput) > f64::from(iops) * GP3_MAX_THROUGHPUT_PER_IOPS {
                        problem(
                            "throughput",
                            format!(
                                "{throughput} MiB/s is more than gp3 allows with {iops} IOPS \
                                 ({GP3_MAX_THROUGHPUT_PER_IOPS} MiB/s per IOPS, at most {}): raise iops or \
                                 lower throughput",
                                (f64::from(iops) * GP3_MAX_THROUGHPUT_PER_IOPS) as u32
                            ),
                        );
                    }
                }
            }
        }
        kind @ ("io1" | "io2") => {
            let (bounds, max_per_gib) = if kind == "io1" {
                (IO1_IOPS, IO1_MAX_IOPS_PER_GIB)
            } else {
                (IO2_IOPS, IO2_MAX_IOPS_PER_GIB)
            };
            match volume.iops {
                None => problem(
                    "iops",
                    format!(
                        "is required for an {kind} volume: provisioned IOPS are what {kind} is"
                    ),
                ),
                Some(iops) if !bounds.contains(&iops) => problem(
                    "iops",
                    format!(
                        "{iops} is outside {kind}'s {}..{}",
                        bounds.start(),
                        bounds.end()
                    ),
                ),
                Some(iops) => {
                    if let Some(message) = per_gib(iops, max_per_gib) {
                        problem("iops", message);
                    }
                }
            }
            if volume.throughput.is_some() {
                problem(
                    "throughput",
                    format!(
                        "an {kind} volume takes no throughput setting (only gp3 does): remove it"
                    ),
                );
            }
        }
        kind => {
            if volume.iops.is_some() {
                problem(
                    "iops",
                    format!("a {kind} volume takes no IOPS setting (gp3, io1 and io2 do): remove it or use gp3"),
                );
            }
            if volume.throughput.is_some() {
                problem(
                    "throughput",
                    format!("a {kind} volume takes no throughput setting (only gp3 does): remove it or use gp3"),
                );
            }
        }
    }
    problems
}

/// The IOPS and throughput (MiB/s) a volume of this type has when the spec sets none: gp3's baseline; `None`
/// for the types whose performance is not set apart from their size (gp2, standard) or must be set (io1/io2).
pub fn baseline(volume_type: &str) -> (Option<u32>, Option<u32>) {
    match volume_type {
        "gp3" => (Some(GP3_BASELINE_IOPS), Some(GP3_BASELINE_THROUGHPUT_MIBS)),
        _ => (None, None),
    }
}

/// The IOPS and throughput a volume has: the spec's, or the type's [`baseline`].
pub fn effective(
    volume_type: &str,
    iops: Option<u32>,
    throughput: Option<u32>,
) -> (Option<u32>, Option<u32>) {
    let (base_iops, base_throughput) = baseline(volume_type);
    (iops.or(base_iops), throughput.or(base_throughput))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(
        volume_type: &str,
        size_gib: u32,
        iops: Option<u32>,
        throughput: Option<u32>,
    ) -> Vec<&'static str> {
        check(Performance {
            volume_type,
            size_gib,
            iops,
            throughput,
        })
        .into_iter()
        .map(|p| p.field)
        .collect()
    }

    #[test]
    fn gp3_takes_iops_and_throughput_within_aws_bounds() {
        assert!(fields("gp3", 64, Some(4000), Some(200)).is_empty());
        assert!(fields("gp3", 64, None, None).is_empty());
        assert!(
            fields("gp3", 64, Some(3000), Some(750)).is_empty(),
            "0.25 MiB/s per IOPS is allowed"
        );
        assert_eq!(fields("gp3", 64, Some(2999), None), ["iops"]);
        assert_eq!(fields("gp3", 64, Some(16_001), None), ["iops"]);
        assert_eq!(fields("gp3", 64, None, Some(124)), ["throughput"]);
        assert_eq!(fields("gp3", 64, None, Some(1001)), ["throughput"]);
    }

    #[test]
    fn gp3_s_ratios_are_held() {
        // 4000 IOPS allow 1000 MiB/s; the baseline 3000 only 750.
        assert_eq!(fields("gp3", 64, None, Some(751)), ["throughput"]);
        assert!(fields("gp3", 64, Some(4000), Some(1000)).is_empty());
        // 500 IOPS per GiB above the baseline: 8 GiB allow 4000, not 4001; the baseline is any size's.
        assert!(fields("gp3", 8, Some(4000), None).is_empty());
        assert_eq!(fields("gp3", 8, Some(4001), None), ["iops"]);
        assert!(fields("gp3", 1, Some(3000), None).is_empty());
    }

    #[test]
    fn io1_and_io2_need_iops_and_take_no_throughput() {
        assert_eq!(fields("io1", 100, None, None), ["iops"]);
        assert!(fields("io1", 100, Some(5000), None).is_empty());
        assert_eq!(fields("io1", 100, Some(5001), None), ["iops"], "50 per GiB");
        assert_eq!(fields("io1", 2000, Some(64_001), None), ["iops"]);
        assert!(fields("io2", 100, Some(100_000), None).is_empty());
        assert_eq!(
            fields("io2", 100, Some(100_001), None),
            ["iops"],
            "1000 per GiB"
        );
        assert_eq!(fields("io2", 100, Some(99), None), ["iops"]);
        assert_eq!(fields("io2", 100, Some(1000), Some(200)), ["throughput"]);
    }

    #[test]
    fn gp2_and_standard_take_neither() {
        assert_eq!(
            fields("gp2", 64, Some(3000), Some(125)),
            ["iops", "throughput"]
        );
        assert_eq!(fields("standard", 64, Some(3000), None), ["iops"]);
        assert!(fields("gp2", 64, None, None).is_empty());
    }

    #[test]
    fn only_gp3_has_a_baseline() {
        assert_eq!(effective("gp3", None, None), (Some(3000), Some(125)));
        assert_eq!(effective("gp3", Some(5000), None), (Some(5000), Some(125)));
        assert_eq!(effective("gp2", None, None), (None, None));
        assert_eq!(effective("io1", Some(200), None), (Some(200), None));
    }
}
