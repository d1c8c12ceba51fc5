//! TLS over TCP (RFC 3261 §26.2, RFC 5630): rustls (ring provider) through tokio-rustls.
//!
//! Only the handshake lives here (tokio-rustls). Once it is done, the session is taken apart
//! into the socket and the rustls connection, which `stream::Link` drives without a task of
//! its own (senders encrypt and write directly), and handed to the stream code of
//! [`crate::tcp`] (framing, limits, idle timeout, write queue, reuse) — or, for WSS, to the
//! WebSocket upgrade in [`crate::ws`].
//!
//! The handshake is bounded by [`crate::TransportConfig::tls_handshake_timeout`]: a peer that
//! sends half a ClientHello and stalls, or garbage, holds one connection slot (subject to the
//! connection limits) until then and is counted in `tls_handshake_failed`; other connections
//! are served by their own tasks meanwhile.

use crate::stream::{Framing, Link};
use crate::{tcp, ws};
use crate::{Inner, TlsConfig};
use bytes::Bytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tandem_sip::Flow;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use tokio_rustls::rustls::{self, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use tokio_rustls::{TlsAcceptor, TlsConnector};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}: no PEM certificate found")]
    NoCertificate(PathBuf),
    #[error("{0}: no PEM private key found (PKCS#8, PKCS#1 or SEC1)")]
    NoPrivateKey(PathBuf),
    #[error("{path}: invalid PEM: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io { path: path.to_path_buf(), source })
}

/// Every certificate in a PEM file, in order (leaf first for a chain).
pub fn certificates_from_pem(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.to_path_buf(), reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// A listener's configuration: certificate chain (leaf first) and private key, both PEM.
pub fn server_config(cert_chain_pem: &[u8], key_pem: &[u8], cert_path: &Path, key_path: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates_from_pem(cert_chain_pem, cert_path)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoPrivateKey(key_path.to_path_buf()))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // No TLS 1.3 session tickets: SIP connections are long-lived and reused, so resumption
    // gains little, and some SIP peers (sipsak built with GnuTLS) take the ticket record that
    // follows the handshake for a response and give up.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Outgoing connections' configuration: the server's certificate must chain to one of the
/// certificates in `ca_pem`; or, with `insecure_skip_verify` (development only), it is not
/// checked at all.
pub fn client_config(ca_pem: Option<(&[u8], &Path)>, insecure_skip_verify: bool) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let config = if insecure_skip_verify {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(SkipVerify(provider()))).with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        if let Some((pem, path)) = ca_pem {
            for cert in certificates_from_pem(pem, path)? {
                roots.add(cert)?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(Arc::new(config))
}

impl TlsConfig {
    /// Reads the PEM files: a listener needs `certificate` and `private_key`; outgoing
    /// connections trust the certificates in `ca` (none without it, unless
    /// `insecure_skip_verify`).
    pub fn from_files(
        certificate: Option<&Path>,
        private_key: Option<&Path>,
        ca: Option<&Path>,
        insecure_skip_verify: bool,
    ) -> Result<TlsConfig, TlsError> {
        let server = match (certificate, private_key) {
            (Some(cert), Some(key)) => Some(server_config(&read(cert)?, &read(key)?, cert, key)?),
            _ => None,
        };
        let ca_pem = ca.map(|path| read(path).map(|pem| (pem, path))).transpose()?;
        let client = if ca_pem.is_some() || insecure_skip_verify {
            Some(client_config(ca_pem.as_ref().map(|(pem, path)| (pem.as_slice(), *path)), insecure_skip_verify)?)
        } else {
            None
        };
        Ok(TlsConfig { server, client })
    }
}

pub(crate) fn acceptor(config: &TlsConfig) -> Option<TlsAcceptor> {
    config.server.clone().map(TlsAcceptor::from)
}

pub(crate) fn connector(config: &TlsConfig) -> Option<TlsConnector> {
    config.client.clone().map(TlsConnector::from)
}

/// An accepted TCP connection on a TLS listener: handshake (bounded), then the stream code.
pub(crate) async fn serve_accepted(inner: Arc<Inner>, stream: TcpStream, acceptor: TlsAcceptor, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    let _ = stream.set_nodelay(true);
    match tokio::time::timeout(inner.config.tls_handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let (stream, session) = tls.into_inner();
            serve_secured(inner, stream, session.into(), rx, flow, Side::Server).await
        }
        Ok(Err(e)) => handshake_failed(&inner, flow, &e.to_string()),
        Err(_) => handshake_failed(&inner, flow, "timed out"),
    }
}

/// An outgoing TCP connection to a TLS peer: client handshake (bounded), then the stream code.
/// The server is named by its IP address (destinations are IP literals for now), so its
/// certificate must carry that address as a subjectAltName.
pub(crate) async fn serve_connected(inner: Arc<Inner>, stream: TcpStream, connector: TlsConnector, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    let _ = stream.set_nodelay(true);
    let name = ServerName::IpAddress(flow.remote.ip().into());
    match tokio::time::timeout(inner.config.tls_handshake_timeout, connector.connect(name, stream)).await {
        Ok(Ok(tls)) => {
            let (stream, session) = tls.into_inner();
            serve_secured(inner, stream, session.into(), rx, flow, Side::Client).await
        }
        Ok(Err(e)) => handshake_failed(&inner, flow, &e.to_string()),
        Err(_) => handshake_failed(&inner, flow, "timed out"),
    }
}

#[derive(Clone, Copy)]
enum Side {
    Server,
    Client,
}

/// The connection after its TLS handshake: SIP framed on the stream (TLS), or WebSocket (WSS).
async fn serve_secured(
    inner: Arc<Inner>,
    stream: TcpStream,
    session: rustls::Connection,
    rx: mpsc::Receiver<Bytes>,
    flow: Flow,
    side: Side,
) {
    let socket = Arc::new(stream);
    let link = Link::tls(socket.clone(), session, inner.config.tcp_write_queue);
    if ws::is_ws(flow.transport) {
        match side {
            Side::Server => ws::serve_accepted(inner, socket, link, rx, flow).await,
            Side::Client => ws::serve_connected(inner, socket, link, rx, flow).await,
        }
    } else {
        tcp::run_established(inner, socket, Framing::Sip(link), rx, flow).await;
    }
}

fn handshake_failed(inner: &Inner, flow: Flow, reason: &str) {
    inner.stats.tls_handshake_failed.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(remote = %flow.remote, reason, "tls handshake failed");
    tcp::close(inner, flow);
}

/// `insecure_skip_verify`: accepts any server certificate (signatures are still checked, so
/// the handshake itself is sound; the peer's identity is not).
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
