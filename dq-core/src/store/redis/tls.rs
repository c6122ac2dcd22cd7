//! TLS settings for `rediss://` connections ([`TlsConfig`]): the certificate authority to
//! trust instead of the built-in roots (a private CA), and a client certificate for servers
//! that require one (mutual TLS, `tls-auth-clients yes`). With the `tls` feature only.
//!
//! One value serves every connection a store makes: to one node, to every node of a cluster
//! (and the wake-up listener's), and to the master Sentinel names.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable naming a PEM file of the CA certificate(s) to trust
/// ([`TlsConfig::from_env`], and the `dq` command line's `--tls-ca`).
pub const ENV_TLS_CA: &str = "DQ_TLS_CA";
/// The environment variable naming a PEM file of the client certificate (chain), for mutual
/// TLS; [`ENV_TLS_KEY`] names its private key.
pub const ENV_TLS_CERT: &str = "DQ_TLS_CERT";
/// The environment variable naming a PEM file of the client certificate's private key.
pub const ENV_TLS_KEY: &str = "DQ_TLS_KEY";

/// How dq's `rediss://` connections authenticate the server, and themselves: give it to
/// [`ClientBuilder::tls`](crate::connect::ClientBuilder::tls) (or
/// [`RedisOptions::tls`](super::RedisOptions::tls)).
///
/// Without one, a `rediss://` URL trusts the Mozilla roots built into dq (`webpki-roots`):
/// right for a managed Redis with a public certificate. A server whose certificate a private
/// CA signed needs that CA: [`TlsConfig::ca_file`]. The server's certificate must name the
/// host of the URL (a DNS name or an IP address in its subject alternative names).
///
/// ```no_run
/// # async fn f() -> dq_core::Result<()> {
/// use dq_core::{Client, TlsConfig};
/// let client = Client::builder()
///     .tls(TlsConfig::new().ca_file("/etc/redis/ca.pem")?)
///     .connect("rediss://app:secret@redis.internal:6380/")
///     .await?;
/// # Ok(()) }
/// ```
///
/// Files are read when the value is made; their contents are never printed (`Debug` says only
/// which parts are set and where they came from).
#[derive(Clone, Default)]
pub struct TlsConfig {
    /// PEM of the CA certificate(s), and where it came from (for error messages).
    ca: Option<(Vec<u8>, String)>,
    /// PEM of the client certificate chain and of its key, and where they came from.
    client: Option<(Vec<u8>, Vec<u8>, String)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca.as_ref().map(|(_, from)| from))
            .field(
                "client_cert",
                &self.client.as_ref().map(|(_, _, from)| from),
            )
            .finish()
    }
}

impl TlsConfig {
    /// No CA (the built-in roots) and no client certificate.
    pub fn new() -> Self {
        TlsConfig::default()
    }

    /// Trusts the CA certificate(s) of `pem` (PEM text: one or more `CERTIFICATE` blocks)
    /// instead of the built-in roots. Checked when the client connects.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some((
            pem.into(),
            "the CA PEM given to TlsConfig::ca_pem".to_owned(),
        ));
        self
    }

    /// Trusts the CA certificate(s) of the PEM file at `path` instead of the built-in roots.
    /// Fails with [`Error::InvalidConfig`] naming the file if it cannot be read.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        self.ca = Some((
            read(path, "CA certificate")?,
            format!("CA file {}", path.display()),
        ));
        Ok(self)
    }

    /// Presents the client certificate (chain) `cert` with its private key `key` (both PEM)
    /// to a server that asks for one (mutual TLS). Checked when the client connects.
    pub fn client_cert_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.client = Some((
            cert.into(),
            key.into(),
            "the client certificate given to TlsConfig::client_cert_pem".to_owned(),
        ));
        self
    }

    /// Like [`TlsConfig::client_cert_pem`], from the PEM files at `cert` and `key`. Fails with
    /// [`Error::InvalidConfig`] naming the file that cannot be read.
    pub fn client_cert_files(
        mut self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        self.client = Some((
            read(cert, "client certificate")?,
            read(key, "client key")?,
            format!("client certificate file {}", cert.display()),
        ));
        Ok(self)
    }

    /// The settings named by files: `ca` (see [`TlsConfig::ca_file`]), `cert` and `key` (see
    /// [`TlsConfig::client_cert_files`]; both or neither). `None` when no file is named: a
    /// `rediss://` URL then trusts the built-in roots. What the `dq` command line's `--tls-ca`,
    /// `--tls-cert` and `--tls-key` give.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<Self>> {
        let mut tls = TlsConfig::new();
        if let Some(ca) = ca {
            tls = tls.ca_file(ca)?;
        }
        match (cert, key) {
            (Some(cert), Some(key)) => tls = tls.client_cert_files(cert, key)?,
            (None, None) => {}
            _ => {
                return Err(Error::InvalidConfig(
                    "a TLS client certificate needs both its certificate file and its key file"
                        .to_owned(),
                ));
            }
        }
        Ok((tls.ca.is_some() || tls.client.is_some()).then_some(tls))
    }

    /// The settings named by the environment: [`ENV_TLS_CA`] (`DQ_TLS_CA`), [`ENV_TLS_CERT`]
    /// and [`ENV_TLS_KEY`] (`DQ_TLS_CERT`, `DQ_TLS_KEY`), as [`TlsConfig::from_files`] reads
    /// them; `None` when none is set (or each is empty).
    pub fn from_env() -> Result<Option<Self>> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let (ca, cert, key) = (var(ENV_TLS_CA), var(ENV_TLS_CERT), var(ENV_TLS_KEY));
        Self::from_files(ca.as_deref(), cert.as_deref(), key.as_deref())
    }

    /// Whether a CA is set (else the built-in roots are trusted).
    pub fn has_ca(&self) -> bool {
        self.ca.is_some()
    }

    /// Whether a client certificate is set.
    pub fn has_client_cert(&self) -> bool {
        self.client.is_some()
    }

    /// The certificates for redis-rs, each PEM checked: a CA that holds no certificate or a
    /// client certificate without a usable key is refused here, naming where it came from,
    /// rather than failing every handshake later.
    #[cfg(feature = "tls")]
    pub(super) fn certificates(&self) -> Result<redis::TlsCertificates> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = |pem: &[u8], from: &str| -> Result<usize> {
            let n = CertificateDer::pem_slice_iter(pem)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::InvalidConfig(format!("TLS: {from} is not valid PEM: {e}")))?
                .len();
            if n == 0 {
                return Err(Error::InvalidConfig(format!(
                    "TLS: {from} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
                )));
            }
            Ok(n)
        };
        if let Some((pem, from)) = &self.ca {
            certs(pem, from)?;
        }
        if let Some((cert, key, from)) = &self.client {
            certs(cert, from)?;
            PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                Error::InvalidConfig(format!(
                    "TLS: the private key of {from} is not a PEM private key: {e}"
                ))
            })?;
        }
        Ok(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key, _)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.as_ref().map(|(pem, _)| pem.clone()),
        })
    }
}

/// The contents of the file at `path`, or an error naming it as `what`.
fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::InvalidConfig(format!(
            "TLS: cannot read the {what} file {}: {e}",
            path.display()
        ))
    })
}

/// What a failed TLS handshake (or TLS setup) in `e` means, for [`Error::Tls`]: `None` when
/// `e` is no TLS failure. Looks for rustls's error under the I/O error redis-rs reports,
/// and, for errors redis-rs only describes in text (a cluster's failed initial connections),
/// for rustls's words.
pub(crate) fn tls_failure(e: &redis::RedisError) -> Option<String> {
    #[cfg(feature = "tls")]
    {
        let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
        while let Some(err) = source {
            if let Some(tls) = err.downcast_ref::<rustls::Error>() {
                return Some(explain_rustls(tls));
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && let Some(tls) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
            {
                return Some(explain_rustls(tls));
            }
            source = err.source();
        }
    }
    let text = e.to_string();
    explain_text(&text)
}

/// A person's words for rustls's error.
#[cfg(feature = "tls")]
fn explain_rustls(e: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError, Error as R};
    let what = match e {
        R::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => {
            "the server's certificate is not signed by a CA this client trusts (is the CA \
             right? TlsConfig::ca_file, `--tls-ca`, DQ_TLS_CA)"
        }
        R::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the server's certificate does not name the host of the URL",
        R::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => "the server's certificate is expired or not valid yet",
        R::InvalidCertificate(_) => "the server's certificate is not acceptable",
        R::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown,
        ) => {
            "the server refused this client's certificate, or wants one (mutual TLS: \
             TlsConfig::client_cert_files, `--tls-cert`/`--tls-key`)"
        }
        _ => "the TLS handshake failed",
    };
    format!("{what} ({e})")
}

/// The same as [`explain_rustls`], from the text of an error that only quotes it.
fn explain_text(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let what = if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        "the server's certificate is not signed by a CA this client trusts (is the CA right? \
         TlsConfig::ca_file, `--tls-ca`, DQ_TLS_CA)"
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        "the server's certificate does not name the host of the URL"
    } else if lower.contains("invalid peer certificate") {
        "the server's certificate is not acceptable"
    } else if lower.contains("received fatal alert") {
        "the server refused the TLS handshake (a client certificate it wants or does not trust?)"
    } else {
        return None;
    };
    // Only rustls's own words are quoted: the whole text may name a URL.
    let start = lower
        .find("invalid peer certificate")
        .or_else(|| lower.find("received fatal alert"));
    Some(match start {
        Some(i) => format!(
            "{what} ({})",
            text[i..].split([',', ')', '"']).next().unwrap_or("").trim()
        ),
        None => what.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_and_named_in_errors() {
        let missing = Path::new("/nonexistent/dq/ca.pem");
        match TlsConfig::new().ca_file(missing) {
            Err(Error::InvalidConfig(m)) => assert!(m.contains("/nonexistent/dq/ca.pem"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(TlsConfig::from_files(None, None, None).unwrap().is_none());
        match TlsConfig::from_files(None, Some(missing), None) {
            Err(Error::InvalidConfig(m)) => assert!(m.contains("both"), "{m}"),
            other => panic!("{other:?}"),
        }
        let tls = TlsConfig::new().ca_pem("-----BEGIN CERTIFICATE-----");
        assert!(tls.has_ca() && !tls.has_client_cert());
        assert!(!format!("{tls:?}").contains("BEGIN"), "{tls:?}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_ca_without_a_certificate_is_refused() {
        match TlsConfig::new().ca_pem("not pem at all").certificates() {
            Err(Error::InvalidConfig(m)) => assert!(m.contains("no PEM certificate"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn handshake_words_are_explained_without_the_rest_of_the_text() {
        let text = "Failed to create initial connections - IoError: rediss://u:pw@h:1/: \
                    invalid peer certificate: UnknownIssuer";
        let why = explain_text(text).unwrap();
        assert!(why.contains("is the CA right?"), "{why}");
        assert!(
            why.contains("UnknownIssuer") && !why.contains("pw"),
            "{why}"
        );
        assert!(explain_text("connection refused").is_none());
    }
}
