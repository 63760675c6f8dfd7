//! The VPC's resolver ("AmazonProvidedDNS"): a DNS server at the VPC's base address + 2, in the cloud's router
//! namespace, answering what AWS's answers inside a VPC and this cloud can know: the names of its network load
//! balancers (their addresses in the VPC) and EC2's private names (`ip-10-0-1-5.us-west-2.compute.internal`,
//! `ip-10-0-1-5.ec2.internal`). Any other name is answered `SERVFAIL` at once: nothing here reaches the internet,
//! and a resolver that stayed silent would make every lookup wait out its timeout.
//!
//! Answering is pure ([`answer`]: a query's bytes and the names in, a response's bytes out); [`serve`] is the
//! socket loop around it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

/// Names the cloud itself makes (its load balancers'), each with its addresses inside the VPCs.
#[derive(Debug, Clone, Default)]
pub struct Names {
    inner: Arc<RwLock<BTreeMap<String, Vec<Ipv4Addr>>>>,
}

impl Names {
    /// Replaces every name with `names` (lower-cased, without a trailing dot).
    pub fn set(&self, names: BTreeMap<String, Vec<Ipv4Addr>>) {
        let names = names
            .into_iter()
            .map(|(n, a)| (n.trim_end_matches('.').to_ascii_lowercase(), a))
            .collect();
        *self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = names;
    }

    /// The addresses of `name`: one of the cloud's names, or an EC2 private name.
    pub fn lookup(&self, name: &str) -> Option<Vec<Ipv4Addr>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(found) = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&name)
        {
            return Some(found.clone());
        }
        ec2_private_name(&name).map(|a| vec![a])
    }
}

/// The address an EC2 private DNS name spells: `ip-A-B-C-D.<region>.compute.internal` or `ip-A-B-C-D.ec2.internal`.
pub fn ec2_private_name(name: &str) -> Option<Ipv4Addr> {
    let (host, domain) = name.split_once('.')?;
    let in_domain = domain == "ec2.internal"
        || domain
            .strip_suffix(".compute.internal")
            .is_some_and(|region| !region.is_empty() && !region.contains('.'));
    if !in_domain {
        return None;
    }
    let octets: Vec<u8> = host
        .strip_prefix("ip-")?
        .split('-')
        .map(|o| o.parse::<u8>().ok())
        .collect::<Option<_>>()?;
    match octets[..] {
        [a, b, c, d] => Some(Ipv4Addr::new(a, b, c, d)),
        _ => None,
    }
}

const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u8 = 1;
const RCODE_SERVFAIL: u8 = 2;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_NOTIMP: u8 = 4;
/// How long an answer may be cached: short, as a load balancer's addresses may change.
const TTL: u32 = 30;

/// The response to DNS message `query`, or `None` when it is not a query worth an answer (too short to carry an
/// ID, or itself a response).
pub fn answer(query: &[u8], names: &Names) -> Option<Vec<u8>> {
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    let opcode = (query[2] >> 3) & 0x0f;
    let questions = u16::from_be_bytes([query[4], query[5]]);
    let reply = |rcode: u8, question: &[u8], answers: &[Ipv4Addr]| {
        let mut out = Vec::with_capacity(12 + question.len() + answers.len() * 16);
        out.extend_from_slice(&query[0..2]);
        // QR, the query's opcode and RD; AA (this resolver owns what it answers), RA.
        out.push(0x80 | (query[2] & 0x79) | 0x04);
        out.push(0x80 | rcode);
        out.extend_from_slice(&u16::from(!question.is_empty()).to_be_bytes());
        out.extend_from_slice(&u16::try_from(answers.len()).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(question);
        for address in answers {
            // A pointer to the question's name, at offset 12.
            out.extend_from_slice(&[0xc0, 12]);
            out.extend_from_slice(&TYPE_A.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
            out.extend_from_slice(&TTL.to_be_bytes());
            out.extend_from_slice(&4u16.to_be_bytes());
            out.extend_from_slice(&address.octets());
        }
        out
    };
    if opcode != 0 {
        return Some(reply(RCODE_NOTIMP, &[], &[]));
    }
    if questions != 1 {
        return Some(reply(RCODE_FORMERR, &[], &[]));
    }
    let Some((name, end)) = read_name(query, 12) else {
        return Some(reply(RCODE_FORMERR, &[], &[]));
    };
    let Some(fixed) = query.get(end..end + 4) else {
        return Some(reply(RCODE_FORMERR, &[], &[]));
    };
    let kind = u16::from_be_bytes([fixed[0], fixed[1]]);
    let class = u16::from_be_bytes([fixed[2], fixed[3]]);
    let question = &query[12..end + 4];
    match names.lookup(&name) {
        // A name of ours: its addresses for A, an empty answer for any other type (it has no AAAA).
        Some(addresses) if kind == TYPE_A && class == CLASS_IN => {
            Some(reply(0, question, &addresses))
        }
        Some(_) => Some(reply(0, question, &[])),
        // Our domains hold nothing else; for the rest of the world there is no upstream.
        None if owned_domain(&name) => Some(reply(RCODE_NXDOMAIN, question, &[])),
        None => Some(reply(RCODE_SERVFAIL, question, &[])),
    }
}

/// Whether `name` is in a domain only this resolver answers for (EC2's private names, load balancers').
fn owned_domain(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.ends_with(".compute.internal")
        || name.ends_with(".ec2.internal")
        || name.ends_with(".elb.amazonaws.com")
}

/// The name at `at` (labels, no compression: a query's question never needs it) and the offset after it.
fn read_name(message: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*message.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 || labels.len() >= 127 {
            return None;
        }
        let label = message.get(at..at + len)?;
        labels.push(String::from_utf8_lossy(label).into_owned());
        at += len;
    }
    Some((labels.join("."), at))
}

/// Answers queries on `socket` until the task is aborted.
pub async fn serve(socket: tokio::net::UdpSocket, names: Names) {
    let mut buffer = vec![0u8; 1500];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buffer).await else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        if let Some(response) = answer(&buffer[..len], &names) {
            let _ = socket.send_to(&response, from).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(id: u16, name: &str, kind: u16) -> Vec<u8> {
        let mut q = id.to_be_bytes().to_vec();
        q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            q.push(u8::try_from(label.len()).expect("a short label"));
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&kind.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    fn names() -> Names {
        let names = Names::default();
        names.set(BTreeMap::from([(
            "API-a-1.elb.us-west-2.amazonaws.com.".to_string(),
            vec![
                Ipv4Addr::new(172, 20, 31, 253),
                Ipv4Addr::new(172, 20, 63, 253),
            ],
        )]));
        names
    }

    /// (rcode, answers' addresses) of a response to `id`.
    fn read(response: &[u8], id: u16) -> (u8, Vec<Ipv4Addr>) {
        assert_eq!(&response[0..2], &id.to_be_bytes());
        assert_eq!(response[2] & 0x80, 0x80, "a response");
        let count = usize::from(u16::from_be_bytes([response[6], response[7]]));
        let (_, end) = read_name(response, 12).expect("the question");
        let mut at = end + 4;
        let mut addresses = Vec::new();
        for _ in 0..count {
            assert_eq!(&response[at..at + 2], &[0xc0, 12]);
            let data = &response[at + 12..at + 16];
            addresses.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
            at += 16;
        }
        assert_eq!(at, response.len());
        (response[3] & 0x0f, addresses)
    }

    #[test]
    fn a_load_balancers_name_is_its_addresses_in_the_vpc() {
        let names = names();
        let response = answer(
            &query(7, "api-A-1.elb.us-west-2.amazonaws.com", TYPE_A),
            &names,
        )
        .expect("an answer");
        assert_eq!(
            read(&response, 7),
            (
                0,
                vec![
                    Ipv4Addr::new(172, 20, 31, 253),
                    Ipv4Addr::new(172, 20, 63, 253)
                ]
            )
        );
        // No AAAA: an empty answer, not an error (so resolvers take the A records).
        let response = answer(&query(8, "api-a-1.elb.us-west-2.amazonaws.com", 28), &names)
            .expect("an answer");
        assert_eq!(read(&response, 8), (0, vec![]));
    }

    #[test]
    fn ec2_private_names_spell_their_address() {
        let names = names();
        for (name, address) in [
            (
                "ip-172-20-0-4.us-west-2.compute.internal",
                Some(Ipv4Addr::new(172, 20, 0, 4)),
            ),
            ("ip-10-0-1-5.ec2.internal", Some(Ipv4Addr::new(10, 0, 1, 5))),
            ("ip-10-0-1-500.ec2.internal", None),
            ("ip-10-0-1.ec2.internal", None),
            ("ip-10-0-1-5.example.com", None),
            ("ip-10-0-1-5.a.b.compute.internal", None),
        ] {
            assert_eq!(ec2_private_name(name), address, "{name}");
        }
        let response = answer(
            &query(9, "ip-172-20-0-4.us-west-2.compute.internal", TYPE_A),
            &names,
        )
        .expect("an answer");
        assert_eq!(read(&response, 9), (0, vec![Ipv4Addr::new(172, 20, 0, 4)]));
    }

    #[test]
    fn unknown_names_fail_at_once() {
        let names = names();
        let owned = answer(
            &query(1, "nothing.us-west-2.compute.internal", TYPE_A),
            &names,
        )
        .expect("an answer");
        assert_eq!(read(&owned, 1), (RCODE_NXDOMAIN, vec![]));
        let world = answer(&query(2, "registry.k8s.io", TYPE_A), &names).expect("an answer");
        assert_eq!(read(&world, 2), (RCODE_SERVFAIL, vec![]));
    }

    #[test]
    fn malformed_messages_are_refused_or_ignored() {
        let names = names();
        assert_eq!(answer(&[0, 1, 2], &names), None);
        let mut response = query(3, "registry.k8s.io", TYPE_A);
        response[2] |= 0x80;
        assert_eq!(
            answer(&response, &names),
            None,
            "a response is not answered"
        );
        let mut truncated = query(4, "registry.k8s.io", TYPE_A);
        truncated.truncate(20);
        let reply = answer(&truncated, &names).expect("an answer");
        assert_eq!(reply[3] & 0x0f, RCODE_FORMERR);
        let mut two = query(5, "registry.k8s.io", TYPE_A);
        two[5] = 2;
        assert_eq!(
            answer(&two, &names).expect("an answer")[3] & 0x0f,
            RCODE_FORMERR
        );
    }
}
