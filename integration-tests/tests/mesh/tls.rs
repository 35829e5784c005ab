//! A mesh over implicit TLS (digest A20) with client certificates: a leaf serves CIP only on a
//! TLS listener that requires a certificate from the mesh CA; a hub with one polls it, a hub
//! without one cannot.

use std::path::{Path, PathBuf};

use cipd::daemon::{Daemon, RunningDaemon};
use cipd::model::config::Config;

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

/// The README's walkthrough: a CA and three node certificates from `cipctl tls`, a leaf,
/// a mid and a root polling each other over TLS with client certificates, and the root
/// queried (and its referrals followed) over HTTPS with an operator's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_tls_mesh_from_cipctl_tls_answers_over_https() {
    use cipd::ctl::tls::{CaArgs, CertArgs, make_ca, make_cert};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca_dir = d.join("ca");
    make_ca(&CaArgs {
        out: ca_dir.clone(),
        name: "test mesh CA".into(),
        days: 30,
    })
    .unwrap();
    for name in ["leaf", "mid", "root", "ops"] {
        make_cert(&CertArgs {
            ca: ca_dir.clone(),
            out: d.join("certs"),
            name: format!("{name}.mesh.test"),
            dns: vec![],
            ips: vec!["127.0.0.1".parse().unwrap()],
            days: 30,
        })
        .unwrap();
    }
    let cert = |n: &str| p(&d.join("certs"), &format!("{n}.mesh.test.pem"));
    let key = |n: &str| p(&d.join("certs"), &format!("{n}.mesh.test.key"));
    let ca = p(&ca_dir, "ca.pem");
    std::fs::write(
        d.join("leaf.soif"),
        "@DOCUMENT { http://leaf/1\nAuthor{6}:\tGarcia\n}\n\
         @DOCUMENT { http://leaf/2\nAuthor{6}:\tGarcia\n}\n",
    )
    .unwrap();
    // Every node: CIP and HTTP only over TLS, both requiring a certificate from the CA.
    let node = |name: &str, dsi: &str, peer: Option<(&str, std::net::SocketAddr)>| {
        let mut t = format!(
            r#"data_dir = {spool:?}
[node]
dsi = "{dsi}"
[listen]
cip_tls = [{{ addr = "127.0.0.1:0", cert = {c:?}, key = {k:?}, client_ca = {ca:?} }}]
https = [{{ addr = "127.0.0.1:0", cert = {c:?}, key = {k:?}, client_ca = {ca:?} }}]
[export]
attributes = ["DOCUMENT:Author"]
[limits]
connect_timeout = "2s"
poll_timeout = "5s"
"#,
            spool = p(d, &format!("spool-{name}")),
            c = cert(name),
            k = key(name),
        );
        if name == "leaf" {
            t.push_str(&format!(
                "[[collection]]\nname = \"docs\"\ntype = \"soif\"\npath = {:?}\n",
                p(d, "leaf.soif")
            ));
        }
        if let Some((child, addr)) = peer {
            t.push_str(&format!(
                "[[peer]]\nname = \"{child}\"\nhost = \"127.0.0.1\"\nport = {}\nrole = \"poll\"\n\
                 poll_interval = \"100ms\"\ntls = {{ ca = {ca:?}, server_name = \"{child}.mesh.test\", \
                 client_cert = {:?}, client_key = {:?} }}\n",
                addr.port(),
                cert(name),
                key(name),
            ));
        }
        t
    };
    let leaf = start(node("leaf", LEAF, None)).await;
    let mid = start(node(
        "mid",
        "1.3.6.1.4.1.99999.63",
        Some(("leaf", leaf.listeners().cip_tls[0])),
    ))
    .await;
    let root = start(node(
        "root",
        "1.3.6.1.4.1.99999.64",
        Some(("mid", mid.listeners().cip_tls[0])),
    ))
    .await;
    let mut status = root.status();
    let polled = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        status.wait_for(|s| s.table_peers >= 1),
    )
    .await
    .is_ok();
    assert!(polled, "{:?}", root.node().peer_states());
    let root_url = format!("https://127.0.0.1:{}", root.https_addr().unwrap().port());
    // Each node names itself by its HTTPS listener.
    assert!(root.node().identity().base_uris[0].starts_with("https://127.0.0.1:"));

    let args = |tls: cipd::ctl::query::ClientTlsArgs| cipd::ctl::query::QueryArgs {
        server: root_url.clone(),
        query: "Author=Garcia".into(),
        json: true,
        possible: false,
        follow: true,
        limit: None,
        timeout: std::time::Duration::from_secs(5),
        tls,
    };
    let ops = cipd::ctl::query::ClientTlsArgs {
        ca: Some(ca.clone().into()),
        cert: Some(cert("ops").into()),
        key: Some(key("ops").into()),
    };
    // The mid's aggregate may still be on its way to the root: follow until it is there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let visits = loop {
        let v = cipd::ctl::query::follow(&args(ops.clone())).await.unwrap();
        if v.len() == 3 || std::time::Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let dsis: Vec<&str> = visits.iter().map(|v| v.answer.dsi.as_str()).collect();
    assert_eq!(dsis, ["1.3.6.1.4.1.99999.64", "1.3.6.1.4.1.99999.63", LEAF]);
    assert_eq!(visits[2].objects.as_ref().unwrap().total, 2);

    // Without a client certificate the root's HTTPS listener refuses the handshake; without
    // the CA the client refuses the root; plain HTTP to the HTTPS port gets nowhere.
    let no_cert = cipd::ctl::query::ClientTlsArgs {
        ca: Some(ca.clone().into()),
        ..Default::default()
    };
    assert!(cipd::ctl::query::follow(&args(no_cert)).await.is_err());
    let e = cipd::ctl::query::follow(&args(Default::default()))
        .await
        .unwrap_err();
    // The mesh's CA is not among the system's roots.
    let text = format!("{e:#}").to_lowercase();
    assert!(
        text.contains("certificate") && text.contains("cannot connect"),
        "{text}"
    );
    let plain = cipd::ctl::query::get_json::<serde_json::Value>(
        &root_url.replace("https://", "http://"),
        "/healthz",
        std::time::Duration::from_secs(5),
    )
    .await;
    assert!(plain.is_err());
    for n in [root, mid, leaf] {
        n.shutdown().await;
    }
}
