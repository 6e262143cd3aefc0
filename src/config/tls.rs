//! The TLS material of `rediss://` connections, read from the files the
//! `redis_tls_*` settings name and checked once, at start
//! ([`RedisTls::load`]), so that a missing or broken file stops the process
//! instead of failing every connection. Errors name the setting at fault.
//!
//! By default the server's certificate must chain to the system's roots and
//! no client certificate is shown. `redis_tls_ca_file` replaces the roots
//! with its CA certificates; `redis_tls_cert_file` and `redis_tls_key_file`
//! show a client certificate (for servers with `tls-auth-clients yes`).
//! The store makes its clients from what is loaded here (`store::tls`).

use std::path::Path;
use std::sync::Arc;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What `rediss://` connections trust and show. The default trusts the
/// system's roots and shows no client certificate.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The PEM files' contents; `None` leaves the redis crate's defaults.
    certs: Option<TlsCertificates>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let certs = self.certs.as_ref();
        f.debug_struct("RedisTls")
            .field("custom_ca", &certs.is_some_and(|c| c.root_cert.is_some()))
            .field(
                "client_certificate",
                &certs.is_some_and(|c| c.client_tls.is_some()),
            )
            .finish()
    }
}

/// One setting's file, and how error messages name the setting (its
/// variable, its flag, or its key in the file).
pub struct SettingFile<'a> {
    pub path: &'a Path,
    pub setting: String,
}

impl<'a> SettingFile<'a> {
    pub fn new(path: &'a Path, setting: impl Into<String>) -> Self {
        SettingFile {
            path,
            setting: setting.into(),
        }
    }

    fn read(&self) -> Result<Vec<u8>, String> {
        std::fs::read(self.path)
            .map_err(|e| format!("{}: cannot read {}: {e}", self.setting, self.path.display()))
    }

    /// The PEM certificates in the file; at least one.
    fn certificates(&self, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.not_pem("certificates", e))?;
        if certs.is_empty() {
            return Err(format!(
                "{}: {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                self.setting,
                self.path.display()
            ));
        }
        Ok(certs)
    }

    fn not_pem(&self, what: &str, e: impl std::fmt::Display) -> String {
        format!(
            "{}: {} is not {what} in PEM: {e}",
            self.setting,
            self.path.display()
        )
    }
}

impl RedisTls {
    /// Reads the CA file and the client certificate and key, and checks
    /// them as rustls will when it connects: the CA certificates parse and
    /// can be trust anchors, the key parses and fits the certificate.
    /// Errors name the setting at fault.
    pub fn load(
        ca: Option<SettingFile<'_>>,
        client: Option<(SettingFile<'_>, SettingFile<'_>)>,
    ) -> Result<RedisTls, String> {
        let root_cert = match ca {
            None => None,
            Some(file) => {
                let pem = file.read()?;
                let mut roots = RootCertStore::empty();
                for cert in file.certificates(&pem)? {
                    roots.add(cert).map_err(|e| {
                        format!(
                            "{}: a certificate in {} cannot be a CA: {e}",
                            file.setting,
                            file.path.display()
                        )
                    })?;
                }
                Some(pem)
            }
        };
        let client_tls = match client {
            None => None,
            Some((cert, key)) => {
                let cert_pem = cert.read()?;
                let chain = cert.certificates(&cert_pem)?;
                let key_pem = key.read()?;
                let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|e| key.not_pem("a private key", e))?;
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .expect("ring's provider supports the default TLS versions")
                    .with_root_certificates(RootCertStore::empty())
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| {
                        format!(
                            "{} ({}) does not fit {} ({}): {e}",
                            key.setting,
                            key.path.display(),
                            cert.setting,
                            cert.path.display()
                        )
                    })?;
                Some(ClientTlsConfig {
                    client_cert: cert_pem,
                    client_key: key_pem,
                })
            }
        };
        let certs = (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        });
        Ok(RedisTls { certs })
    }

    /// The CA and client certificate, if any were configured, for the
    /// Sentinel and Cluster clients (only for TLS addresses: they refuse
    /// certificates for plain TCP).
    pub fn certificates(&self) -> Option<&TlsCertificates> {
        self.certs.as_ref()
    }
}
