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
    Ok(server_in(hosts_text()?.as_deref(), name, port))
}

/// The hosts file's text, if `BALLAST_HOSTS_FILE` names one.
fn hosts_text() -> Result<Option<String>, String> {
    let Some(path) = std::env::var_os(HOSTS_FILE_ENV).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    std::fs::read_to_string(&path).map(Some).map_err(|e| {
        format!(
            "reading {HOSTS_FILE_ENV} ({}): {e}",
            std::path::Path::new(&path).display()
        )
    })
}

/// [`server_for`] with the hosts file's text given.
fn server_in(hosts: Option<&str>, name: &str, port: u16) -> (String, Option<String>) {
    match hosts.and_then(|text| lookup(text, name)) {
        Some(IpAddr::V4(ip)) => (format!("https://{ip}:{port}"), Some(name.to_string())),
        Some(IpAddr::V6(ip)) => (format!("https://[{ip}]:{port}"), Some(name.to_string())),
        None => (format!("https://{name}:{port}"), None),
    }
}

/// Points a client `config` at the address the hosts file gives its server's name, if it gives one: the URL's
/// host becomes the address and the name becomes the TLS server name (unless the kubeconfig already set one).
pub fn redirect(config: &mut kube::Config) -> Result<(), String> {
    redirect_in(hosts_text()?.as_deref(), config)
}

/// [`redirect`] with the hosts file's text given.
fn redirect_in(hosts: Option<&str>, config: &mut kube::Config) -> Result<(), String> {
    let url = &config.cluster_url;
    let (Some(host), Some("https")) = (url.host(), url.scheme_str()) else {
        return Ok(());
    };
    let port = url.port_u16().unwrap_or(443);
    let (server, Some(name)) = server_in(hosts, host, port) else {
        return Ok(());
    };
    let path = url
        .path_and_query()
        .map_or("", |p| p.as_str())
        .trim_end_matches('/');
    config.cluster_url = format!("{server}{path}")
        .parse()
        .map_err(|e| format!("the hosts file's address for {name}: {e}"))?;
    config.tls_server_name.get_or_insert(name);
    Ok(())
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

    #[test]
    fn a_client_is_pointed_at_the_hosts_files_address_and_keeps_checking_the_name() {
        let hosts = "127.252.0.1 api-a.elb.us-west-2.amazonaws.com\n";
        let mut config = kube::Config::new(
            "https://api-a.elb.us-west-2.amazonaws.com"
                .parse()
                .expect("a URL"),
        );
        redirect_in(Some(hosts), &mut config).expect("redirected");
        assert_eq!(config.cluster_url.to_string(), "https://127.252.0.1:443/");
        assert_eq!(
            config.tls_server_name.as_deref(),
            Some("api-a.elb.us-west-2.amazonaws.com")
        );

        // A name the file does not hold, an address, and no file at all: dialled as written.
        for (hosts, url) in [
            (Some(hosts), "https://api.other.example.com:6443"),
            (Some(hosts), "https://10.0.0.1:443"),
            (None, "https://api-a.elb.us-west-2.amazonaws.com"),
        ] {
            let mut config = kube::Config::new(url.parse().expect("a URL"));
            let before = config.cluster_url.clone();
            redirect_in(hosts, &mut config).expect("nothing to do");
            assert_eq!(config.cluster_url, before, "{url}");
            assert_eq!(config.tls_server_name, None, "{url}");
        }
    }
}
