//! Lists what is left in AWS of a cluster, by tag and by name, with the same scan `ctl_delete_cluster` makes
//! after a delete (`ballast_e2e::leftovers`): `tools/demo` runs it after `ballast delete cluster --yes`.
//!
//! Run: `leftovers CLUSTER`, with the AWS environment of the account to scan (`eval "$(localcloud env)"` for
//! the local cloud). Exits 0 when nothing is left, 1 when something is (each resource on its own line), 2 on a
//! usage error.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cluster] = args.as_slice() else {
        eprintln!("usage: leftovers CLUSTER (with AWS_ENDPOINT_URL and credentials of the account to scan)");
        return ExitCode::from(2);
    };
    let config = aws_config::from_env().load().await;
    let found = ballast_e2e::leftovers::scan(&config, cluster).await;
    if found.is_empty() {
        println!("nothing of {cluster} is left in AWS (every kind Ballast creates, scanned by tag and by name)");
        return ExitCode::SUCCESS;
    }
    println!("{} resource(s) of {cluster} are left in AWS:", found.len());
    for resource in &found {
        println!("  {resource}");
    }
    ExitCode::FAILURE
}
