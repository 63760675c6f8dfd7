//! `localcloud env`: the environment for AWS SDK clients and ballast, for `eval`.

use crate::error::LocalCloudError;
use crate::state::{CloudRecord, StateDir, STATE_DIR_ENV};

pub(super) fn run(state: &StateDir) -> Result<(), LocalCloudError> {
    print!("{}", env_exports(state, &state.read_cloud()?));
    Ok(())
}

/// The environment `localcloud env` prints: the operator's admin keys, the emulator, the region, and the
/// network CIDR Ballast should default to on the local cloud; for machines, the hosts file of its load balancers.
pub(super) fn env_exports(state: &StateDir, record: &CloudRecord) -> String {
    let vars = [
        ("AWS_ACCESS_KEY_ID", record.admin.access_key_id.as_str()),
        (
            "AWS_SECRET_ACCESS_KEY",
            record.admin.secret_access_key.as_str(),
        ),
        ("AWS_REGION", record.region.as_str()),
        ("AWS_DEFAULT_REGION", record.region.as_str()),
        ("AWS_ENDPOINT_URL", record.endpoint.as_str()),
        ("BALLAST_NETWORK_CIDR", record.network_cidr.as_str()),
        (STATE_DIR_ENV, &state.root().to_string_lossy()),
    ];
    let mut out = String::new();
    // Anything that would make an SDK prefer other credentials than the exported keys.
    out.push_str("unset AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE\n");
    for (name, value) in vars {
        out.push_str(&format!("export {name}={}\n", sh_quote(value)));
    }
    // Machines' load balancers are reached on the host through the names in this file.
    if record.machines.is_some() {
        let hosts = crate::balancers::hosts_file(state);
        out.push_str(&format!(
            "export BALLAST_HOSTS_FILE={}\n",
            sh_quote(&hosts.to_string_lossy())
        ));
    }
    out
}

/// Shell-quotes a value for `eval`.
fn sh_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}
