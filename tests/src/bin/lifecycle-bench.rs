//! The published kops benchmark's phases on the local cloud (IAM enforced), at one of its sizes: create until
//! validated, a Kubernetes upgrade rolled until validated (every instance of the size created), the node group
//! doubled until validated, one control-plane instance terminated until validated. Prints Ballast's times beside the published ones (AWS
//! us-west-2, where instance boot and image download dominate: the local cloud measures Ballast's own cost), and
//! per phase the AWS calls of `ballast`, the local cloud's peak memory and the peak RSS of nodeup and `ballast`.
//!
//! cargo run --release -p ballast-e2e --bin lifecycle-bench -- --size small|medium|large [--phases N|LIST]
//!
//! `--phases N` (1 to 4) stops after the first N phases (a large roll takes many minutes on 2 cores);
//! `--phases create,recovery` runs the named phases in their usual order (create always runs first).

use std::time::Instant;

use ballast_e2e::lifecycle::{human, Lifecycle, PhaseReport, Size, FROM_VERSION, TO_VERSION};
use ballast_e2e::localcloud::bench_binaries;

/// The published benchmark's phases, in the order they run: the roll before the doubling, so it replaces the
/// size's own instances (5 + 100 at large, issue 33's measure), and the recovery last, at the doubled size.
const PHASES: [&str; 4] = ["create", "upgrade", "double", "recovery"];

fn main() {
    let mut args = std::env::args().skip(1);
    let mut size = Size::Small;
    let mut phases = vec![true; PHASES.len()];
    let usage = || -> ! {
        eprintln!(
            "usage: lifecycle-bench --size small|medium|large [--phases 1..4 | a list of {}]",
            PHASES.join(",")
        );
        std::process::exit(2);
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--size" => {
                size = args
                    .next()
                    .as_deref()
                    .and_then(Size::parse)
                    .unwrap_or_else(|| usage())
            }
            "--phases" => {
                phases = args
                    .next()
                    .as_deref()
                    .and_then(parse_phases)
                    .unwrap_or_else(|| usage())
            }
            _ => usage(),
        }
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench(size, &phases));
}

/// `N` (the first N phases) or a comma-separated list of phase names; create always runs (the others need a
/// cluster).
fn parse_phases(text: &str) -> Option<Vec<bool>> {
    if let Ok(count) = text.parse::<usize>() {
        return (1..=PHASES.len())
            .contains(&count)
            .then(|| (0..PHASES.len()).map(|i| i < count).collect());
    }
    let mut chosen = vec![false; PHASES.len()];
    chosen[0] = true;
    for name in text.split(',') {
        let index = PHASES.iter().position(|p| *p == name.trim())?;
        chosen[index] = true;
    }
    Some(chosen)
}

async fn bench(size: Size, chosen: &[bool]) {
    let ballast = bench_binaries();
    let (control_plane, nodes) = size.instances();
    eprintln!(
        "lifecycle-bench: {} ({control_plane} control-plane + {nodes} nodes), ballast at {}",
        size.name(),
        ballast.display()
    );
    let started = Instant::now();
    let mut life = Lifecycle::start(size, ballast).await;
    eprintln!("local cloud ready in {}", human(started.elapsed()));
    let mut phases: Vec<Option<PhaseReport>> = Vec::new();
    for (phase, &run) in chosen.iter().enumerate() {
        if !run {
            phases.push(None);
            continue;
        }
        let report = match phase {
            0 => life.create(),
            1 => life.upgrade(),
            2 => life.double_nodes(),
            _ => life.recover_control_plane().await,
        };
        eprintln!(
            "{}: {} ({} instances running)",
            report.name,
            human(report.wall),
            life.running_instances()
        );
        phases.push(Some(report));
    }
    print_table(size, &phases);
}

/// One line per phase: its name, then `items` of it joined by commas.
fn print_per_phase(ran: &[&PhaseReport], items: impl Fn(&PhaseReport) -> Vec<String>) {
    for phase in ran {
        println!("  {}: {}", phase.name, items(phase).join(", "));
    }
}

fn print_table(size: Size, phases: &[Option<PhaseReport>]) {
    let (control_plane, nodes) = size.instances();
    let published = size.published();
    println!();
    println!(
        "{} ({control_plane} + {nodes}), Kubernetes {FROM_VERSION} -> {TO_VERSION}, node group {nodes} -> {}",
        size.name(),
        nodes * 2
    );
    println!(
        "{:<24} {:>14} {:>14}",
        "phase", "kops on AWS", "Ballast here"
    );
    // The published table's columns are the phases in the order they run.
    for (column, phase) in phases.iter().enumerate() {
        let Some(phase) = phase else {
            println!(
                "{:<24} {:>14} {:>14}",
                [
                    "create",
                    "rolling upgrade",
                    "node group doubled",
                    "control-plane recovery"
                ][column],
                published[column],
                "not run"
            );
            continue;
        };
        let mut ballast = human(phase.wall);
        if let Some(after_boot) = phase.from_replacement_boot {
            ballast = format!(
                "{ballast} ({} after the replacement's boot)",
                human(after_boot)
            );
        }
        println!(
            "{:<24} {:>14} {:>14}",
            phase.name, published[column], ballast
        );
    }
    println!();
    println!(
        "{:<24} {:>10} {:>9} {:>10} {:>9} {:>11} {:>11} {:>11} {:>12}",
        "phase",
        "AWS calls",
        "mutating",
        "validate",
        "checks",
        "cloud MiB",
        "nodeup MiB",
        "ballast MiB",
        "ballast CPU"
    );
    let ran: Vec<&PhaseReport> = phases.iter().flatten().collect();
    for phase in &ran {
        println!(
            "{:<24} {:>10} {:>9} {:>10} {:>9} {:>11.0} {:>11.1} {:>11.1} {:>12}",
            phase.name,
            phase.calls.0,
            phase.calls.1,
            phase.validate_calls,
            phase.validate_checks,
            phase.cloud_peak_mib,
            phase.nodeup_peak_mib,
            phase.ballast_peak_mib,
            format!(
                "{:.1}+{:.1} s",
                phase.ballast_cpu_s.0, phase.ballast_cpu_s.1
            )
        );
    }
    println!();
    println!("AWS calls: of the phase's changing ballast runs (create / replace / update / rolling-update); validate:");
    println!("the calls of the phase's `validate cluster --wait` run, and how many checks it made until valid;");
    println!("ballast CPU: user + system seconds of the changing runs + of the validate runs.");
    print_per_phase(&ran, |phase| {
        phase
            .operations
            .iter()
            .map(|(op, n)| format!("{op}={n}"))
            .collect()
    });
    println!();
    println!("The validate --wait run's checks per phase (`ballast -v`: check number, seconds, outcome):");
    for phase in &ran {
        println!("  {}:", phase.name);
        for check in &phase.check_log {
            println!("    {check}");
        }
    }
    println!();
    println!("Each phase's timeline, seconds from its start:");
    print_per_phase(&ran, |phase| {
        phase
            .timeline
            .iter()
            .map(|(what, at)| format!("{what} {at:.1}"))
            .collect()
    });
    for phase in ran.iter().filter(|p| !p.etcd_reports.is_empty()) {
        println!();
        println!(
            "etcd health reports published during the {}, oldest first:",
            phase.name
        );
        for line in &phase.etcd_reports {
            println!("  {line}");
        }
    }
    println!();
    println!("What the emulator served per phase (everyone's calls), the most costly first: count (CPU seconds,");
    println!("wall seconds summed over its threads, waits for Python's GIL included)");
    for phase in &ran {
        let top: Vec<String> = phase
            .emulator
            .iter()
            .take(10)
            .map(|(call, s)| format!("{call} {} ({:.1} s, {:.1} s)", s.count, s.cpu_s, s.wall_s))
            .collect();
        let cpu: f64 = phase.emulator.iter().map(|e| e.1.cpu_s).sum();
        let wall: f64 = phase.emulator.iter().map(|e| e.1.wall_s).sum();
        println!(
            "  {} [{cpu:.1} s CPU, {wall:.1} s wall in all]: {}",
            phase.name,
            top.join(", ")
        );
    }
}
