//! A mesh over implicit TLS (digest A20) with client certificates: a leaf serves CIP only on a
//! TLS listener that requires a certificate from the mesh CA; a hub with one polls it, a hub
//! without one cannot.

use std::path::{Path, PathBuf};

use cipd::config::Config;
use cipd::daemon::{Daemon, RunningDaemon};

const LEAF: &str = "1.3.6.1.4.1.99999.61";
const HUB: &str = "1.3.6.1.4.1.99999.60";
const STRANGER: &str = "1.3.6.1.4.1.99999.62";

/// A CA, a server certificate for `leaf.mesh.test` and a client certificate, as PEM files.
fn pki(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, san) in [("leaf", "leaf.mesh.test"), ("hub", "hub.mesh.test")] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![san.to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

fn p(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

async fn start(text: String) -> RunningDaemon {
    Daemon::start(Config::from_toml(&text).unwrap())
        .await
        .unwrap()
}

fn hub_config(dir: &Path, dsi: &str, leaf: std::net::SocketAddr, client_cert: bool) -> String {
    let spool: PathBuf = dir.join(format!("spool-{dsi}"));
    let client = if client_cert {
        format!(
            ", client_cert = {:?}, client_key = {:?}",
            p(dir, "hub.pem"),
            p(dir, "hub.key")
        )
    } else {
        String::new()
    };
    format!(
        r#"data_dir = {spool:?}
[node]
dsi = "{dsi}"
base_uri = "http://{dsi}.mesh.test/"
[listen]
cip = ["127.0.0.1:0"]
[[peer]]
name = "leaf"
host = "127.0.0.1"
port = {port}
role = "poll"
poll_interval = "100ms"
tls = {{ ca = {ca:?}, server_name = "leaf.mesh.test"{client} }}
[limits]
connect_timeout = "2s"
poll_timeout = "5s"
"#,
        spool = spool.display().to_string(),
        port = leaf.port(),
        ca = p(dir, "ca.pem"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_mesh() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pki(d);
    std::fs::write(
        d.join("leaf.soif"),
        "@DOCUMENT { http://leaf/1\nAuthor{6}:\tGarcia\n}\n",
    )
    .unwrap();
    let leaf = start(format!(
        r#"data_dir = {spool:?}
[node]
dsi = "{LEAF}"
base_uri = "ldap://leaf.mesh.test/o=Leaf"
[listen]
cip_tls = [{{ addr = "127.0.0.1:0", cert = {cert:?}, key = {key:?}, client_ca = {ca:?} }}]
[[collection]]
name = "docs"
type = "soif"
path = {coll:?}
[export]
attributes = ["DOCUMENT:Author"]
"#,
        spool = p(d, "spool-leaf"),
        cert = p(d, "leaf.pem"),
        key = p(d, "leaf.key"),
        ca = p(d, "ca.pem"),
        coll = p(d, "leaf.soif"),
    ))
    .await;
    let leaf_addr = leaf.listeners().cip_tls[0];
    assert!(leaf.listeners().cip.is_empty(), "no plain listener");

    let hub = start(hub_config(d, HUB, leaf_addr, true)).await;
    let mut status = hub.status();
    // Keep no `watch::Ref` alive: it would hold the channel's lock and stall the node.
    let polled = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        status.wait_for(|s| s.table_peers >= 1),
    )
    .await
    .is_ok();
    assert!(
        polled,
        "the hub polls the leaf over TLS: {:?}",
        hub.node().peer_states()
    );
    let answer = hub
        .node()
        .referrals("DOCUMENT:Author=Garcia", false, None)
        .unwrap();
    assert_eq!(answer.referrals.len(), 1, "{answer:?}");
    assert_eq!(answer.referrals[0].dsi, LEAF);
    assert_eq!(
        answer.referrals[0].base_uri,
        ["ldap://leaf.mesh.test/o=Leaf"]
    );

    // Without a client certificate the leaf refuses the handshake: polls fail, visibly.
    let stranger = start(hub_config(d, STRANGER, leaf_addr, false)).await;
    let mut status = stranger.status();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        status.wait_for(|s| s.polls_failed >= 1),
    )
    .await
    .expect("the stranger's poll fails")
    .unwrap();
    assert_eq!(stranger.node().status_snapshot().table_peers, 0);
    let err = stranger.node().peer_states()[0]
        .last_error
        .clone()
        .unwrap_or_default();
    assert!(!err.is_empty());

    assert!(stranger.shutdown().await);
    assert!(hub.shutdown().await);
    assert!(leaf.shutdown().await);
}
