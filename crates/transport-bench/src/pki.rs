//! A throw-away CA and a certificate for 127.0.0.1, made with rcgen at start-up.

use std::path::Path;
use std::sync::Arc;
use tandem_transport::rustls::{ClientConfig, ServerConfig};
use tandem_transport::{client_config, server_config, TlsConfig};

#[derive(Clone)]
pub struct Pki {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

impl Pki {
    pub fn generate() -> anyhow::Result<Pki> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key)?;
        let key = KeyPair::generate()?;
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])?.signed_by(&key, &ca, &ca_key)?;
        let p = Path::new("generated");
        // The same configurations as Tandem builds from PEM files: verified chain, no tickets.
        let server = server_config(leaf.pem().as_bytes(), key.serialize_pem().as_bytes(), p, p)?;
        let client = client_config(Some((ca.pem().as_bytes(), p)), false)?;
        Ok(Pki { server, client })
    }

    pub fn tls_config(&self) -> TlsConfig {
        TlsConfig { server: Some(self.server.clone()), client: Some(self.client.clone()) }
    }
}
