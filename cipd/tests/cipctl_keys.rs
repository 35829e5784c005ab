//! `cipctl keygen`, `cipctl hint verify` and `cipctl tls` as operators run them.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

fn cipctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cipctl"))
        .args(args)
        .output()
        .expect("cipctl runs")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_then_verify_a_signed_hint() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let o = cipctl(&["keygen", "--out", s(&keys)]);
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[signing]") && out.contains("public_key = \"ed25519:"),
        "{out}"
    );
    assert_eq!(mode(&keys.join("node.key")), 0o600);
    assert_eq!(mode(&keys), 0o700);
    // A second run never overwrites the key.
    let again = cipctl(&["keygen", "--out", s(&keys)]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));

    // Sign a hint as the daemon does, then check it with the public key file and text.
    let key = cipd::model::trust::keys::NodeKey::load(&keys.join("node.key")).unwrap();
    let mut hint = hints::hint::CipHint::with_weightlist(
        hints::hint::AttrSpec::new("DOCUMENT", "Author").unwrap(),
        3,
        [("Garcia", 2)],
    );
    cipd::model::trust::signature::sign(&mut hint, &key, std::time::SystemTime::now());
    let file = dir.path().join("hint.soif");
    std::fs::write(&file, hint.to_soif().to_bytes()).unwrap();
    let public = key.public().to_string();
    for k in [s(&keys.join("node.pub")), public.as_str()] {
        let o = cipctl(&["hint", "verify", "--key", k, s(&file)]);
        assert!(o.status.success(), "{o:?}");
        assert!(String::from_utf8_lossy(&o.stdout).contains("signature valid"));
    }
    // A changed count no longer verifies: exit 1 with the 531 code.
    let text = String::from_utf8(std::fs::read(&file).unwrap()).unwrap();
    std::fs::write(&file, text.replace("Garcia;2", "Garcia;3")).unwrap();
    let o = cipctl(&["hint", "verify", "--key", &public, s(&file)]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("531"), "{o:?}");
}

#[test]
fn tls_ca_and_cert_write_usable_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let certs = dir.path().join("certs");
    let o = cipctl(&["tls", "ca", "--out", s(&ca)]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(mode(&ca.join("ca.key")), 0o600);
    let o = cipctl(&[
        "tls",
        "cert",
        "--ca",
        s(&ca),
        "--out",
        s(&certs),
        "--name",
        "leaf.example.net",
        "--ip",
        "127.0.0.1",
    ]);
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[[listen.cip_tls]]") && out.contains("client_ca"),
        "{out}"
    );
    assert_eq!(mode(&certs.join("leaf.example.net.key")), 0o600);
    assert!(
        std::fs::read_to_string(certs.join("leaf.example.net.pem"))
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    let o = cipctl(&[
        "tls",
        "cert",
        "--ca",
        s(&dir.path().join("none")),
        "--out",
        s(&certs),
        "--name",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read the CA key"));
}
