//! `skiff certs`: a CA and the certificates of a store cluster's members and clients, for
//! `https://` URLs (`--cert-file`, `--peer-cert-file`, `etcdctl --cacert --cert --key`).
//!
//! Files, in `--dir` (keys readable by their owner only):
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca-key.pem` | the CA (kept and reused when the directory already has one) |
//! | `<member>.pem`, `<member>-key.pem` | a member's certificate, for its client and peer URLs alike (server and client use; the hosts as SANs) |
//! | `service-account-key.pem` | (`skiff up`) the key its API servers sign service account tokens with |
//! | `<client>.pem`, `<client>-key.pem` | a client's certificate (CN = the name: the etcd user under client certificate authentication, the Kubernetes user under `--client-ca-file`; a `/GROUP` after the name its O, a Kubernetes group; colons in the name are dashes in the file's: `system-node-n1.pem`) |

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the files go (created if missing).
    #[arg(long, default_value = "certs")]
    dir: PathBuf,
    /// A member to make a certificate for (repeatable).
    #[arg(long = "member")]
    members: Vec<String>,
    /// A client to make a certificate for (repeatable): `NAME[/GROUP]`, the name its CN
    /// (and file name), the group its O (`admin/system:masters`).
    #[arg(long = "client")]
    clients: Vec<String>,
    /// Host names and IP addresses the members' certificates are valid for (comma-separated);
    /// each member's name is added.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1,localhost")]
    hosts: Vec<String>,
    /// Days the new certificates are valid for.
    #[arg(long, default_value_t = 365)]
    days: i64,
    /// Write over existing member and client files (the CA is always kept).
    #[arg(long)]
    force: bool,
}

/// The CA's subject: a reused CA key signs under the same name.
const CA_NAME: &str = "skiff CA";

pub fn run(a: &Args) -> Result<ExitCode> {
    if a.members.is_empty() && a.clients.is_empty() {
        bail!("nothing to make: name at least one --member or --client");
    }
    if a.days <= 0 {
        bail!("--days must be at least 1");
    }
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let (ca, ca_key) = ca(&a.dir, a.days)?;
    for name in &a.members {
        let params = member(name, &a.hosts, a.days)?;
        issue(&a.dir, name, params, &ca, &ca_key, a.force)?;
    }
    for spec in &a.clients {
        let (name, group) = match spec.split_once('/') {
            Some((name, group)) => (name, Some(group)),
            None => (spec.as_str(), None),
        };
        if group.is_some_and(|g| g.is_empty() || g.contains('/')) {
            bail!("--client {spec:?}: expected NAME or NAME/GROUP (one group a certificate)")
        }
        let params = client(name, group, a.days)?;
        issue(&a.dir, &file_name(name), params, &ca, &ca_key, a.force)?;
    }
    println!(
        "CA {}; certificates for {} in {}",
        a.dir.join("ca.pem").display(),
        a.members
            .iter()
            .chain(&a.clients)
            .map(|c| file_name(c.split('/').next().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(", "),
        a.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The file name of a client's certificate: its name with colons as dashes
/// (`system:node:n1` → `system-node-n1.pem`), since curl and others read a colon in a
/// certificate path as the start of a password.
fn file_name(name: &str) -> String {
    name.replace(':', "-")
}

/// A member's certificate: serving and dialling, for `hosts` and its own name.
fn member(name: &str, hosts: &[String], days: i64) -> Result<CertificateParams> {
    let mut hosts = hosts.to_vec();
    if !hosts.iter().any(|h| h == name) {
        hosts.push(name.to_owned());
    }
    leaf(name, &hosts, days, true)
}

/// A client's certificate: CN `name` (the user), O `group` (its group) when given.
fn client(name: &str, group: Option<&str>, days: i64) -> Result<CertificateParams> {
    let mut params = leaf(name, &[], days, false)?;
    if let Some(g) = group {
        params.distinguished_name.push(DnType::OrganizationName, g);
    }
    Ok(params)
}

/// A client certificate of a local cluster: its file name, CN (user) and O (group).
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    pub file: &'a str,
    pub user: &'a str,
    pub group: Option<&'a str>,
}

/// How long the certificates of a local cluster are valid.
const LOCAL_DAYS: i64 = 365;

/// The certificates of a local cluster in `dir`, made where missing (a resumed cluster keeps
/// the ones it has): the CA, each member's (valid for `hosts`), each client's.
pub fn ensure(
    dir: &Path,
    members: &[&str],
    hosts: &[String],
    clients: &[ClientIdentity<'_>],
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ca, ca_key) = ca(dir, LOCAL_DAYS)?;
    let missing = |file: &str| !dir.join(format!("{file}.pem")).exists();
    for m in members.iter().filter(|m| missing(m)) {
        issue(dir, m, member(m, hosts, LOCAL_DAYS)?, &ca, &ca_key, true)?;
    }
    for c in clients.iter().filter(|c| missing(c.file)) {
        let params = client(c.user, c.group, LOCAL_DAYS)?;
        issue(dir, c.file, params, &ca, &ca_key, true)?;
    }
    Ok(())
}

/// The file of a local cluster's service account signing key, beside its certificates.
pub const SERVICE_ACCOUNT_KEY: &str = "service-account-key.pem";

/// The key a local cluster's API servers sign service account tokens with (ECDSA P-256,
/// PKCS#8 PEM, readable by its owner only), made where missing.
pub fn ensure_service_account_key(dir: &Path) -> Result<()> {
    let path = dir.join(SERVICE_ACCOUNT_KEY);
    if path.exists() {
        return Ok(());
    }
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .context("making the service account key")?;
    write(&path, &key.serialize_pem(), true, false)
}

/// Valid from yesterday (clocks drift) to `days` from now.
fn set_validity(params: &mut CertificateParams, days: i64) {
    use chrono::Datelike as _;
    let from = chrono::Utc::now() - chrono::Duration::days(1);
    let to = chrono::Utc::now() + chrono::Duration::days(days);
    params.not_before = rcgen::date_time_ymd(from.year(), from.month() as u8, from.day() as u8);
    params.not_after = rcgen::date_time_ymd(to.year(), to.month() as u8, to.day() as u8);
}

fn ca_params(days: i64) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, days.max(3650));
    params
}

/// The CA of `dir`: made when missing, else its key reused under the same name (so what it
/// signs now chains to the `ca.pem` already handed out).
fn ca(dir: &Path, days: i64) -> Result<(Certificate, KeyPair)> {
    let cert_path = dir.join("ca.pem");
    let key_path = dir.join("ca-key.pem");
    match (cert_path.exists(), key_path.exists()) {
        (true, true) => {
            let pem = std::fs::read_to_string(&key_path)
                .with_context(|| format!("reading {}", key_path.display()))?;
            let key = KeyPair::from_pem(&pem)
                .with_context(|| format!("{}: not a private key", key_path.display()))?;
            let cert = ca_params(days)
                .self_signed(&key)
                .context("signing with the CA key")?;
            Ok((cert, key))
        }
        (false, false) => {
            let key = KeyPair::generate().context("generating the CA key")?;
            let cert = ca_params(days)
                .self_signed(&key)
                .context("making the CA certificate")?;
            write(&key_path, &key.serialize_pem(), true, false)?;
            write(&cert_path, &cert.pem(), false, false)?;
            Ok((cert, key))
        }
        _ => bail!(
            "{} has only one of ca.pem and ca-key.pem: restore the other or remove both",
            dir.display()
        ),
    }
}

/// A member's (`server`: serving and dialling, valid for `hosts`) or a client's certificate.
fn leaf(name: &str, hosts: &[String], days: i64, server: bool) -> Result<CertificateParams> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    for h in hosts {
        let san = match h.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                h.clone()
                    .try_into()
                    .with_context(|| format!("--hosts: {h:?} is not a host name"))?,
            ),
        };
        params.subject_alt_names.push(san);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, days);
    Ok(params)
}

fn issue(
    dir: &Path,
    name: &str,
    params: CertificateParams,
    ca: &Certificate,
    ca_key: &KeyPair,
    force: bool,
) -> Result<()> {
    if name.is_empty() || name.contains(['/', '\\']) || name == "ca" {
        bail!("{name:?} cannot name a certificate file");
    }
    let key = KeyPair::generate().with_context(|| format!("generating {name}'s key"))?;
    let cert = params
        .signed_by(&key, ca, ca_key)
        .with_context(|| format!("signing {name}'s certificate"))?;
    write(
        &dir.join(format!("{name}-key.pem")),
        &key.serialize_pem(),
        true,
        force,
    )?;
    write(&dir.join(format!("{name}.pem")), &cert.pem(), false, force)
}

/// Writes a new file (`secret`: readable by its owner only); an existing one only when
/// `replace`.
fn write(path: &Path, text: &str, secret: bool, replace: bool) -> Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).mode(if secret { 0o600 } else { 0o644 });
    if replace {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(path).with_context(|| {
        if path.exists() && !replace {
            format!("{} exists (--force writes over it)", path.display())
        } else {
            format!("writing {}", path.display())
        }
    })?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
