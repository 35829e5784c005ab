//! `cipctl tls ca` and `cipctl tls cert`: a mesh CA and the certificates its nodes present,
//! so a TLS mesh needs no openssl.
//!
//! The CA signs every node's certificate; each node trusts the CA (`ca`/`client_ca` in its
//! configuration). A node certificate is good for both ends (serverAuth and clientAuth):
//! the node presents it on its TLS listeners and as the client certificate when it polls.
//! Private keys are written with mode 0600 and never overwritten.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use super::fail;

/// File names in a CA directory.
const CA_CERT: &str = "ca.pem";
const CA_KEY: &str = "ca.key";

/// The `cipctl tls` subcommands.
#[derive(Debug, Subcommand)]
pub enum TlsCommand {
    /// Make a mesh CA: `ca.pem` (give it to every node) and `ca.key` (keep it offline).
    Ca(CaArgs),
    /// Make a node's certificate and key, signed by the mesh CA.
    Cert(CertArgs),
}

/// Arguments of `cipctl tls ca`.
#[derive(Debug, Args)]
pub struct CaArgs {
    /// Directory for `ca.pem` and `ca.key` (created with mode 0700 when missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The CA's common name.
    #[arg(long, default_value = "cipd mesh CA")]
    pub name: String,
    /// Validity in days.
    #[arg(long, default_value_t = 3650)]
    pub days: u32,
}

/// Arguments of `cipctl tls cert`.
#[derive(Debug, Args)]
pub struct CertArgs {
    /// The CA directory `cipctl tls ca` wrote.
    #[arg(long, value_name = "DIR")]
    pub ca: PathBuf,
    /// Directory for `NAME.pem` and `NAME.key`.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The node's host name: its common name and first DNS name, and the file names.
    #[arg(long)]
    pub name: String,
    /// More DNS names the node answers to. Repeat for more.
    #[arg(long = "dns", value_name = "NAME")]
    pub dns: Vec<String>,
    /// IP addresses the node answers on (e.g. 127.0.0.1). Repeat for more.
    #[arg(long = "ip", value_name = "ADDR")]
    pub ips: Vec<IpAddr>,
    /// Validity in days.
    #[arg(long, default_value_t = 825)]
    pub days: u32,
}

/// Runs a `cipctl tls` subcommand.
pub fn run(cmd: TlsCommand) -> ExitCode {
    let result = match cmd {
        TlsCommand::Ca(a) => make_ca(&a),
        TlsCommand::Cert(a) => make_cert(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack for peers whose clocks run behind.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// Writes a new CA into `args.out`.
///
/// # Errors
/// When a file exists or cannot be written, or the key cannot be made.
pub fn make_ca(args: &CaArgs) -> anyhow::Result<()> {
    let (cert_path, key_path) = (args.out.join(CA_CERT), args.out.join(CA_KEY));
    refuse_existing(&[&cert_path, &key_path])?;
    let key = KeyPair::generate().context("cannot generate the CA key")?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = name(&args.name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, args.days);
    let cert = params.self_signed(&key).context("cannot sign the CA")?;
    create_dir(&args.out)?;
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
    println!(
        "CA certificate: {} (every node's ca / client_ca)",
        cert_path.display()
    );
    println!(
        "CA key:         {} (mode 0600; keep it off the nodes)",
        key_path.display()
    );
    println!();
    println!(
        "Next, one per node: cipctl tls cert --ca {} --out DIR --name HOST [--ip ADDR]",
        args.out.display()
    );
    Ok(())
}

/// Writes a node certificate signed by the CA in `args.ca`.
///
/// # Errors
/// When the CA cannot be read, a file exists, or a name is not valid.
pub fn make_cert(args: &CertArgs) -> anyhow::Result<()> {
    let (ca_cert, ca_key) = (args.ca.join(CA_CERT), args.ca.join(CA_KEY));
    let ca_key_pem = std::fs::read_to_string(&ca_key)
        .with_context(|| format!("cannot read the CA key {}", ca_key.display()))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)
        .with_context(|| format!("{} is not a PEM private key", ca_key.display()))?;
    let ca_pem = std::fs::read_to_string(&ca_cert)
        .with_context(|| format!("cannot read the CA certificate {}", ca_cert.display()))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .with_context(|| format!("{} is not a PEM certificate", ca_cert.display()))?;
    if args.name.is_empty() || args.name.contains(['/', '\0']) || args.name.starts_with('.') {
        bail!("--name {:?}: expected a host name", args.name);
    }
    let (cert_path, key_path) = (
        args.out.join(format!("{}.pem", args.name)),
        args.out.join(format!("{}.key", args.name)),
    );
    refuse_existing(&[&cert_path, &key_path])?;
    let mut sans = Vec::new();
    for dns in std::iter::once(&args.name).chain(&args.dns) {
        // An address given as --name goes in as an IP SAN, as TLS clients match it.
        match dns.parse::<IpAddr>() {
            Ok(ip) => sans.push(SanType::IpAddress(ip)),
            Err(_) => sans.push(SanType::DnsName(
                dns.as_str()
                    .try_into()
                    .with_context(|| format!("{dns:?} is not a DNS name"))?,
            )),
        }
    }
    sans.extend(args.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let key = KeyPair::generate().context("cannot generate the node key")?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.subject_alt_names = sans;
    params.distinguished_name = name(&args.name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, args.days);
    let cert = params
        .signed_by(&key, &issuer)
        .context("cannot sign the certificate")?;
    create_dir(&args.out)?;
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
    let (c, k, ca) = (cert_path.display(), key_path.display(), ca_cert.display());
    println!("certificate: {c}");
    println!("key:         {k} (mode 0600)");
    println!();
    println!(
        "On {}, a TLS listener that wants client certificates:",
        args.name
    );
    println!("  [[listen.cip_tls]]");
    println!("  addr = \"0.0.0.0:7443\"");
    println!("  cert = \"{c}\"\n  key = \"{k}\"\n  client_ca = \"{ca}\"");
    println!();
    println!("and in each [[peer]] it reaches over TLS:");
    println!("  tls = {{ ca = \"{ca}\", client_cert = \"{c}\", client_key = \"{k}\" }}");
    Ok(())
}

fn name(common: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common);
    dn
}

fn refuse_existing(paths: &[&Path]) -> anyhow::Result<()> {
    for p in paths {
        if p.exists() {
            bail!(
                "{} exists; remove it first or choose another directory",
                p.display()
            );
        }
    }
    Ok(())
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    crate::model::trust::keys::create_private_dir(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    crate::model::trust::keys::write_new(path, bytes, mode)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_ca_signs_node_certificates_that_rustls_accepts_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        make_ca(&CaArgs {
            out: ca_dir.clone(),
            name: "test mesh CA".into(),
            days: 30,
        })
        .unwrap();
        let certs = dir.path().join("certs");
        make_cert(&CertArgs {
            ca: ca_dir.clone(),
            out: certs.clone(),
            name: "leaf.mesh.test".into(),
            dns: vec![],
            ips: vec!["127.0.0.1".parse().unwrap()],
            days: 30,
        })
        .unwrap();
        for key in [ca_dir.join("ca.key"), certs.join("leaf.mesh.test.key")] {
            let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
        }
        // The daemon's own TLS loaders take them: a listener that requires client
        // certificates from the CA, and a client presenting one.
        let server = crate::sys::tls::server_config(
            &certs.join("leaf.mesh.test.pem"),
            &certs.join("leaf.mesh.test.key"),
            Some(&ca_dir.join("ca.pem")),
        );
        assert!(server.is_ok(), "{:?}", server.err());
        let client = crate::sys::tls::client_config(
            &ca_dir.join("ca.pem"),
            Some((
                &certs.join("leaf.mesh.test.pem"),
                &certs.join("leaf.mesh.test.key"),
            )),
        );
        assert!(client.is_ok(), "{:?}", client.err());
        // Never overwritten.
        let again = make_cert(&CertArgs {
            ca: ca_dir.clone(),
            out: certs.clone(),
            name: "leaf.mesh.test".into(),
            dns: vec![],
            ips: vec![],
            days: 30,
        });
        assert!(again.unwrap_err().to_string().contains("exists"));
        let bad = make_cert(&CertArgs {
            ca: dir.path().join("nowhere"),
            out: certs,
            name: "x".into(),
            dns: vec![],
            ips: vec![],
            days: 30,
        });
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("cannot read the CA key")
        );
    }
}
