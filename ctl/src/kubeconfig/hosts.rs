//! Names `ballast` dials itself (the API's load balancer) may come from a hosts(5) file before DNS: the file
//! `BALLAST_HOSTS_FILE` names. For split-horizon DNS, a tunnel to a private API, or the local cloud (its
//! `localcloud env` sets it): the client then dials the file's address and still checks the API server's
//! certificate against the load balancer's name (`tls-server-name`).

use std::net::IpAddr;

/// The variable that names the file.
pub const HOSTS_FILE_ENV: &str = "BALLAST_HOSTS_FILE";

/// The address `text` (hosts(5): `ADDRESS NAME [ALIAS...]`, `#` comments) gives `name`, if any.
pub fn lookup(text: &str, name: &str) -> Option<IpAddr> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let address: IpAddr = fields.next()?.parse().ok()?;
            fields
                .any(|n| n.eq_ignore_ascii_case(name))
                .then_some(address)
        })
}

/// Where a client reaches `https://name:port`: the URL to dial and, when the hosts file gave the address, the
/// name the server's certificate must carry. A named file that cannot be read is an error (never a silent
/// fallback to DNS).
pub fn server_for(name: &str, port: u16) -> Result<(String, Option<String>), String> {
    let by_name = || (format!("https://{name}:{port}"), None);
    let Some(path) = std::env::var_os(HOSTS_FILE_ENV).filter(|p| !p.is_empty()) else {
        return Ok(by_name());
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "reading {HOSTS_FILE_ENV} ({}): {e}",
            std::path::Path::new(&path).display()
        )
    })?;
    Ok(match lookup(&text, name) {
        Some(IpAddr::V4(ip)) => (format!("https://{ip}:{port}"), Some(name.to_string())),
        Some(IpAddr::V6(ip)) => (format!("https://[{ip}]:{port}"), Some(name.to_string())),
        None => by_name(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_found_by_any_of_its_aliases_and_comments_are_skipped() {
        let text = "# local cloud\n127.0.0.1 localhost\n127.18.0.7\tapi-a.elb.amazonaws.com api-a  # NLB\n\
                    bogus line\n::1 six.example.com\n";
        assert_eq!(
            lookup(text, "API-A.elb.amazonaws.com"),
            Some("127.18.0.7".parse().expect("ip"))
        );
        assert_eq!(
            lookup(text, "api-a"),
            Some("127.18.0.7".parse().expect("ip"))
        );
        assert_eq!(
            lookup(text, "six.example.com"),
            Some("::1".parse().expect("ip"))
        );
        assert_eq!(lookup(text, "NLB"), None);
        assert_eq!(lookup(text, "bogus"), None);
    }
}
