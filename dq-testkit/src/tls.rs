//! Certificates made at test time ([`TestCerts`], with `rcgen`) and the TLS settings of a test
//! server ([`ServerTls`]).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

/// A certificate authority made for one test, and certificates it signed, as PEM files in a
/// temporary directory (removed when the value is dropped: keep it alive as long as a server
/// that uses it runs, or restarts).
///
/// - the CA's certificate ([`TestCerts::ca_file`], [`TestCerts::ca_pem`]);
/// - a server certificate for `127.0.0.1`, `::1` and `localhost` ([`TestCerts::server_cert_file`],
///   [`TestCerts::server_key_file`]), good for client authentication too (Redis presents it
///   to its peers with `tls-replication` and `tls-cluster`);
/// - a client certificate ([`TestCerts::client_cert_file`], [`TestCerts::client_key_file`])
///   for mutual TLS.
///
/// Two calls make two unrelated CAs: one's server certificate is not trusted by the other's
/// CA (the wrong-CA test).
pub struct TestCerts {
    dir: TempDir,
    ca_pem: String,
}

const CA: &str = "ca.pem";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server-key.pem";
const CLIENT_CERT: &str = "client.pem";
const CLIENT_KEY: &str = "client-key.pem";

impl TestCerts {
    /// Makes a fresh CA and the certificates it signs (ECDSA P-256, valid from 1975 to
    /// 4096, rcgen's defaults), and writes them. Panics if that fails: this is test code.
    pub fn generate() -> TestCerts {
        Self::try_generate().unwrap_or_else(|e| panic!("dq-testkit: cannot make certificates: {e}"))
    }

    fn try_generate() -> Result<TestCerts, Box<dyn std::error::Error>> {
        let dir = tempfile::Builder::new()
            .prefix("dq-testkit-tls-")
            .tempdir()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(
            DnType::CommonName,
            format!("dq-testkit CA {}", dir.path().display()),
        );
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let leaf = |names: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>, cn: &str| {
            let mut params = CertificateParams::new(names)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = usages;
            let key = KeyPair::generate()?;
            let cert = params.signed_by(&key, &ca)?;
            Ok::<_, rcgen::Error>((cert.pem(), key.serialize_pem()))
        };
        let (server, server_key) = leaf(
            ["127.0.0.1", "::1", "localhost"].map(String::from).into(),
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            "dq-testkit redis-server",
        )?;
        let (client, client_key) = leaf(
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
            "dq-testkit client",
        )?;
        let ca_pem = ca.pem();
        for (name, pem) in [
            (CA, &ca_pem),
            (SERVER_CERT, &server),
            (SERVER_KEY, &server_key),
            (CLIENT_CERT, &client),
            (CLIENT_KEY, &client_key),
        ] {
            std::fs::write(dir.path().join(name), pem)?;
        }
        Ok(TestCerts { dir, ca_pem })
    }

    /// The CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA's certificate file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join(CA)
    }

    /// The server certificate's file.
    pub fn server_cert_file(&self) -> PathBuf {
        self.dir.path().join(SERVER_CERT)
    }

    /// The server certificate's private key file.
    pub fn server_key_file(&self) -> PathBuf {
        self.dir.path().join(SERVER_KEY)
    }

    /// The client certificate's file.
    pub fn client_cert_file(&self) -> PathBuf {
        self.dir.path().join(CLIENT_CERT)
    }

    /// The client certificate's private key file.
    pub fn client_key_file(&self) -> PathBuf {
        self.dir.path().join(CLIENT_KEY)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// TLS settings for a test server with these certificates; clients need no certificate
    /// of their own unless [`ServerTls::auth_clients`] is set.
    pub fn server_tls(&self) -> ServerTls {
        ServerTls {
            ca: self.ca_file(),
            cert: self.server_cert_file(),
            key: self.server_key_file(),
            auth_clients: false,
        }
    }
}

impl std::fmt::Debug for TestCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCerts")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// TLS for a test server ([`ServerOptions::tls`](crate::ServerOptions::tls)): besides its
/// plain port (the test kit's own admin connections, `redis-cli`), the server listens with
/// TLS on a second port, [`RedisServer::tls_port`](crate::RedisServer::tls_port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    /// The CA file (`--tls-ca-cert-file`): which client certificates the server trusts, and
    /// its peers' with `tls-replication` / `tls-cluster`.
    pub ca: PathBuf,
    /// The server's certificate file (`--tls-cert-file`).
    pub cert: PathBuf,
    /// The server's key file (`--tls-key-file`).
    pub key: PathBuf,
    /// Whether a client must present a certificate the CA signed (`--tls-auth-clients yes`;
    /// default `no`).
    pub auth_clients: bool,
}

impl ServerTls {
    /// Requires clients to present a certificate the CA signed (mutual TLS).
    pub fn auth_clients(mut self, required: bool) -> Self {
        self.auth_clients = required;
        self
    }

    /// The server arguments for TLS on `tls_port`.
    pub(crate) fn args(&self, tls_port: u16) -> Vec<std::ffi::OsString> {
        vec![
            "--tls-port".into(),
            tls_port.to_string().into(),
            "--tls-cert-file".into(),
            self.cert.clone().into(),
            "--tls-key-file".into(),
            self.key.clone().into(),
            "--tls-ca-cert-file".into(),
            self.ca.clone().into(),
            "--tls-auth-clients".into(),
            if self.auth_clients { "yes" } else { "no" }.into(),
        ]
    }
}
