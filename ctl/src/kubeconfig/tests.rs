use super::*;

fn entry(user: UserEntry) -> ClusterEntry {
    ClusterEntry {
        tls_server_name: None,
        name: "demo.example.com".to_string(),
        server: "https://api-demo.elb.example:443".to_string(),
        ca_pem: "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n".to_string(),
        user,
    }
}

fn admin() -> UserEntry {
    UserEntry::Certificate {
        name: "demo.example.com".to_string(),
        cert_pem: "CERT".to_string(),
        key_pem: "KEY".to_string(),
    }
}

fn parse(text: &str) -> Value {
    yaml_serde::from_str(text).expect("valid YAML")
}

fn named<'a>(config: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    config
        .get(list)?
        .as_sequence()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
}

const OTHER: &str = "\
apiVersion: v1
kind: Config
preferences:
  colors: true
clusters:
- name: other
  cluster:
    server: https://other:6443
    insecure-skip-tls-verify: true
users:
- name: other
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: aws
contexts:
- name: other
  context: {cluster: other, user: other, namespace: team}
current-context: other
";

#[test]
fn a_new_file_gets_the_three_entries_and_the_current_context() {
    let text = merge(None, &entry(admin()), Path::new("/k")).expect("merge");
    let config = parse(&text);
    assert_eq!(config["apiVersion"].as_str(), Some("v1"));
    assert_eq!(config["kind"].as_str(), Some("Config"));
    assert_eq!(config["current-context"].as_str(), Some("demo.example.com"));
    let cluster = named(&config, "clusters", "demo.example.com").expect("cluster");
    assert_eq!(
        cluster["cluster"]["server"].as_str(),
        Some("https://api-demo.elb.example:443")
    );
    let ca = cluster["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("ca data");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .expect("base64");
    assert!(String::from_utf8(decoded).expect("utf8").contains("CA"));
    let user = named(&config, "users", "demo.example.com").expect("user");
    assert_eq!(
        user["user"]["client-key-data"].as_str(),
        Some(
            base64::engine::general_purpose::STANDARD
                .encode("KEY")
                .as_str()
        )
    );
    let context = named(&config, "contexts", "demo.example.com").expect("context");
    assert_eq!(
        context["context"]["user"].as_str(),
        Some("demo.example.com")
    );
}

#[test]
fn other_entries_and_unknown_fields_survive() {
    let text = merge(Some(OTHER), &entry(admin()), Path::new("/k")).expect("merge");
    let config = parse(&text);
    let original = parse(OTHER);
    for list in ["clusters", "users", "contexts"] {
        assert_eq!(
            named(&config, list, "other"),
            named(&original, list, "other"),
            "{list}"
        );
    }
    assert_eq!(config["preferences"], original["preferences"]);
    assert_eq!(config["current-context"].as_str(), Some("demo.example.com"));
}

#[test]
fn a_second_export_replaces_its_own_entries_instead_of_adding_more() {
    let first = merge(Some(OTHER), &entry(admin()), Path::new("/k")).expect("first");
    let mut again = entry(UserEntry::Certificate {
        name: "demo.example.com".to_string(),
        cert_pem: "CERT2".to_string(),
        key_pem: "KEY2".to_string(),
    });
    again.server = "https://moved:443".to_string();
    let second = merge(Some(&first), &again, Path::new("/k")).expect("second");
    let config = parse(&second);
    for list in ["clusters", "users", "contexts"] {
        let count = config[list]
            .as_sequence()
            .expect("list")
            .iter()
            .filter(|v| v["name"].as_str() == Some("demo.example.com"))
            .count();
        assert_eq!(count, 1, "{list}");
    }
    let cluster = named(&config, "clusters", "demo.example.com").expect("cluster");
    assert_eq!(
        cluster["cluster"]["server"].as_str(),
        Some("https://moved:443")
    );
}

#[test]
fn an_existing_user_is_only_named_never_overwritten() {
    let text = merge(
        Some(OTHER),
        &entry(UserEntry::Existing {
            name: "other".to_string(),
        }),
        Path::new("/k"),
    )
    .expect("merge");
    let config = parse(&text);
    assert_eq!(
        named(&config, "users", "other"),
        named(&parse(OTHER), "users", "other")
    );
    assert!(named(&config, "users", "demo.example.com").is_none());
    let context = named(&config, "contexts", "demo.example.com").expect("context");
    assert_eq!(context["context"]["user"].as_str(), Some("other"));
}

#[test]
fn files_that_are_not_kubeconfigs_are_refused_naming_them() {
    for (text, says) in [
        ("- a\n- b\n", "top level is not a mapping"),
        ("kind: Pod\n", "`kind` is not Config"),
        (
            "kind: Config\nclusters: {a: 1}\n",
            "`clusters` is not a list",
        ),
        ("clusters: [\n", "not a kubeconfig (YAML)"),
    ] {
        let err = merge(
            Some(text),
            &entry(admin()),
            Path::new("/home/a/.kube/config"),
        )
        .expect_err(text);
        let message = err.to_string();
        assert!(message.contains("/home/a/.kube/config"), "{message}");
        assert!(message.contains(says), "{text:?}: {message}");
    }
    // Empty and null documents are new files.
    for text in ["", "\n", "null\n", "~"] {
        merge(Some(text), &entry(admin()), Path::new("/k")).expect(text);
    }
}

#[test]
fn the_file_is_chosen_as_kubectl_chooses_it() {
    let home = Path::new("/home/a");
    let none = |_: &Path| None;
    assert_eq!(
        choose_file(Some(Path::new("/x")), Some("/a:/b"), Some(home), none),
        Some(PathBuf::from("/x"))
    );
    assert_eq!(
        choose_file(None, None, Some(home), none),
        Some(PathBuf::from("/home/a/.kube/config"))
    );
    assert_eq!(choose_file(None, Some(""), None, none), None);
    // Nothing exists: the last of the list.
    assert_eq!(
        choose_file(None, Some("/a:/b"), Some(home), none),
        Some(PathBuf::from("/b"))
    );
    // The first that exists.
    let exists_b_c = |p: &Path| (p != Path::new("/a")).then_some(false);
    assert_eq!(
        choose_file(None, Some("/a:/b:/c"), Some(home), exists_b_c),
        Some(PathBuf::from("/b"))
    );
    // The one that already defines the cluster wins.
    let c_defines = |p: &Path| match p.to_str() {
        Some("/c") => Some(true),
        Some("/b") => Some(false),
        _ => None,
    };
    assert_eq!(
        choose_file(None, Some("/a:/b:/c"), Some(home), c_defines),
        Some(PathBuf::from("/c"))
    );
}

#[test]
fn defines_name_reads_contexts_and_clusters() {
    assert!(defines_name(OTHER, "other"));
    assert!(!defines_name(OTHER, "demo.example.com"));
    assert!(!defines_name("{{{", "other"));
}

#[test]
fn debug_output_never_shows_the_key() {
    let debug = format!("{:?}", entry(admin()));
    assert!(!debug.contains("KEY"), "{debug}");
}
