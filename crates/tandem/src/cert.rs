//! `tandem cert`: a development CA and a certificate signed by it, for TLS listeners.

use anyhow::{Context as _, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use std::io::Write as _;
use std::path::Path;

const DEFAULT_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Writes `ca.pem`, `cert.pem` (the certificate, then the CA: the chain a listener presents)
/// and `key.pem` (mode 0600) into `dir`, and prints the `[tls]` lines that use them.
pub fn write(dir: &Path, hosts: &[String]) -> Result<()> {
    let hosts: Vec<String> = if hosts.is_empty() { DEFAULT_HOSTS.iter().map(|h| h.to_string()).collect() } else { hosts.to_vec() };
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.distinguished_name.push(DnType::CommonName, "Tandem development CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = ca_params.self_signed(&ca_key).context("signing the CA certificate")?;

    let key = KeyPair::generate().context("generating the key")?;
    let mut params = CertificateParams::new(hosts.clone()).with_context(|| format!("invalid --host in {hosts:?}"))?;
    params.distinguished_name.push(DnType::CommonName, hosts[0].as_str());
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca, &ca_key).context("signing the certificate")?;

    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
    let (ca_path, cert_path, key_path) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&ca_path, ca.pem()).with_context(|| format!("writing {}", ca_path.display()))?;
    std::fs::write(&cert_path, format!("{}{}", cert.pem(), ca.pem())).with_context(|| format!("writing {}", cert_path.display()))?;
    write_private(&key_path, key.serialize_pem().as_bytes())?;

    println!("# development certificate for {} (not for production), written to {}", hosts.join(", "), dir.display());
    println!("[tls]");
    println!("certificate = {:?}", cert_path.display().to_string());
    println!("private_key = {:?}", key_path.display().to_string());
    println!("ca = {:?}   # trust roots for outgoing TLS (and for peers: this CA)", ca_path.display().to_string());
    Ok(())
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(data).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_load_as_tls_configuration() {
        let dir = std::env::temp_dir().join(format!("tandem-cert-test-{}", std::process::id()));
        write(&dir, &["127.0.0.1".to_string(), "sip.example.test".to_string()]).unwrap();
        let (ca, cert, key) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        let tls = tandem_transport::TlsConfig::from_files(Some(&cert), Some(&key), Some(&ca), false).unwrap();
        assert!(tls.server.is_some() && tls.client.is_some());
        // The chain is the certificate, then the CA.
        let chain = tandem_transport::certificates_from_pem(&std::fs::read(&cert).unwrap(), &cert).unwrap();
        assert_eq!(chain.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
