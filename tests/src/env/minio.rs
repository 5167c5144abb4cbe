//! A real S3 server: MinIO from the testbins (`minio/minio`), on a free port of a host address
//! (loopback, or the pod runner's bridge address so Pods reach it through a Service, see
//! [`Minio::expose`]), plain HTTP or HTTPS with a test CA, with one bucket and two users created through its admin API
//! (`minio/minio-setup`, madmin-go):
//!
//! - `writer`: Get/Put/Delete/AbortMultipartUpload/ListMultipartUploadParts on the bucket's
//!   objects and ListBucket/ListBucketMultipartUploads on the bucket, what the snapshot agent and
//!   a schedule's retention need;
//! - `nolist`: Put/AbortMultipartUpload/ListMultipartUploadParts only, so HeadObject answers 403.
//!   On AWS S3 a user with GetObject but without ListBucket already gets 403 for a missing key;
//!   MinIO answers such a user 404, so here the user lacks GetObject too, which gives the 403 the
//!   agent must fail closed on.
//!
//! The server can be killed and restarted on the same port and data (for mid-upload failures);
//! the root client lists objects and in-progress multipart uploads for assertions.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use rcgen::ExtendedKeyUsagePurpose;

use super::control_plane::{free_port, wait_until};
use super::pki::{Authority, Leaf};
use super::ports::listens;
use super::process::Process;
use super::{Error, Testbins};

/// The testbins part holding `minio` and `minio-setup`.
pub const MINIO: &str = "minio";
pub const ROOT_USER: &str = "minioroot";
pub const ROOT_PASSWORD: &str = "minioroot-secret";
pub const BUCKET: &str = "snapshots";

/// An access key pair.
#[derive(Debug, Clone)]
pub struct S3User {
    pub access_key: String,
    pub secret_key: String,
}

pub struct Minio {
    bin: PathBuf,
    data_dir: PathBuf,
    certs_dir: Option<PathBuf>,
    log_dir: PathBuf,
    host: IpAddr,
    pub port: u16,
    /// `http(s)://<host>:<port>`.
    pub endpoint: String,
    /// The test CA's PEM file when serving HTTPS.
    pub ca_file: Option<PathBuf>,
    pub bucket: String,
    pub writer: S3User,
    pub nolist: S3User,
    /// More environment for the server (its OpenID provider, [`Minio::start_with_openid`]).
    env: Vec<(String, String)>,
    process: Option<Process>,
}

/// An OpenID provider MinIO trusts for STS `AssumeRoleWithWebIdentity`, with a role policy: every
/// token of `client_id` (its audience) gets `role_policy` under [`OpenId::role_arn`].
#[derive(Debug, Clone)]
pub struct OpenId {
    /// The provider's discovery document, e.g. the test apiserver's
    /// `https://127.0.0.1:<port>/.well-known/openid-configuration`.
    pub config_url: String,
    /// The audience the tokens carry.
    pub client_id: String,
    /// The built-in or created policy the assumed role gets.
    pub role_policy: String,
    /// The CA (PEM file) of the provider's serving certificate, trusted by MinIO for the
    /// discovery document and the JWKS.
    pub ca_file: PathBuf,
}

impl OpenId {
    /// The role ARN MinIO gives this provider: `arn:minio:iam:::role/` and the URL-safe base64
    /// (no padding) of the SHA-1 of the client ID (MinIO's rule, with no server region set).
    pub fn role_arn(&self) -> String {
        use base64::Engine as _;
        let sha1 = aws_lc_rs::digest::digest(
            &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
            self.client_id.as_bytes(),
        );
        format!(
            "arn:minio:iam:::role/{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha1.as_ref())
        )
    }
}

impl Minio {
    /// Start MinIO on loopback under `root` (data, certificates, logs), create the bucket and
    /// the users.
    pub async fn start(testbins: &Testbins, root: &Path, use_tls: bool) -> Result<Self, Error> {
        Self::start_on(testbins, root, use_tls, IpAddr::V4(Ipv4Addr::LOCALHOST)).await
    }

    /// [`Minio::start`] listening on `host` (an address of this machine), e.g. the pod runner's
    /// [`host_address`](crate::podrunner::PodRunner::host_address) so Pods can dial it.
    pub async fn start_on(
        testbins: &Testbins,
        root: &Path,
        use_tls: bool,
        host: IpAddr,
    ) -> Result<Self, Error> {
        Self::start_with(testbins, root, use_tls, host, None).await
    }

    /// [`Minio::start_on`] (plain HTTP) with `openid` as its identity provider: STS
    /// `AssumeRoleWithWebIdentity` on the S3 endpoint itself hands out credentials of
    /// [`OpenId::role_arn`] for the provider's tokens.
    pub async fn start_with_openid(
        testbins: &Testbins,
        root: &Path,
        host: IpAddr,
        openid: &OpenId,
    ) -> Result<Self, Error> {
        Self::start_with(testbins, root, false, host, Some(openid)).await
    }

    async fn start_with(
        testbins: &Testbins,
        root: &Path,
        use_tls: bool,
        host: IpAddr,
        openid: Option<&OpenId>,
    ) -> Result<Self, Error> {
        let bin = testbins.binary(MINIO, "minio")?;
        let setup = testbins.binary(MINIO, "minio-setup")?;
        let data_dir = root.join("minio-data");
        let log_dir = root.join("logs");
        std::fs::create_dir_all(&data_dir).map_err(Error::io("creating the MinIO data dir"))?;
        let (certs_dir, ca_file) = if use_tls {
            let certs = root.join("minio-certs");
            std::fs::create_dir_all(&certs).map_err(Error::io("creating the MinIO certs dir"))?;
            let ca = Authority::new("minio-test-ca")?;
            let (cert, key) = ca.sign(Leaf {
                common_name: "minio",
                organizations: &[],
                sans: &["127.0.0.1", "localhost", &host.to_string()],
                usages: &[ExtendedKeyUsagePurpose::ServerAuth],
            })?;
            let write = |name: &Path, pem: &str| {
                std::fs::write(name, pem).map_err(Error::io(format!("writing {}", name.display())))
            };
            write(&certs.join("public.crt"), &cert)?;
            write(&certs.join("private.key"), &key)?;
            let ca_file = root.join("minio-ca.crt");
            write(&ca_file, &ca.cert_pem)?;
            (Some(certs), Some(ca_file))
        } else {
            (None, None)
        };
        let mut env = Vec::new();
        let certs_dir = match openid {
            Some(openid) => {
                // MinIO trusts the CAs in `<certs-dir>/CAs` for its own requests (the discovery
                // document and the JWKS); without public.crt there it still serves plain HTTP.
                let certs = certs_dir.unwrap_or_else(|| root.join("minio-certs"));
                let cas = certs.join("CAs");
                std::fs::create_dir_all(&cas).map_err(Error::io("creating the MinIO CAs dir"))?;
                std::fs::copy(&openid.ca_file, cas.join("openid-provider.crt"))
                    .map_err(Error::io("copying the OpenID provider's CA"))?;
                for (key, value) in [
                    (
                        "MINIO_IDENTITY_OPENID_CONFIG_URL",
                        openid.config_url.as_str(),
                    ),
                    ("MINIO_IDENTITY_OPENID_CLIENT_ID", openid.client_id.as_str()),
                    (
                        "MINIO_IDENTITY_OPENID_ROLE_POLICY",
                        openid.role_policy.as_str(),
                    ),
                ] {
                    env.push((key.to_string(), value.to_string()));
                }
                Some(certs)
            }
            None => certs_dir,
        };
        let port = free_port()?;
        let scheme = if use_tls { "https" } else { "http" };
        let mut minio = Self {
            bin,
            data_dir,
            certs_dir,
            log_dir,
            host,
            port,
            endpoint: format!("{scheme}://{host}:{port}"),
            ca_file,
            bucket: BUCKET.to_string(),
            writer: S3User {
                access_key: "writer".into(),
                secret_key: "writer-secret-key".into(),
            },
            nolist: S3User {
                access_key: "nolist".into(),
                secret_key: "nolist-secret-key".into(),
            },
            env,
            process: None,
        };
        minio.run().await?;
        minio
            .root_client()
            .create_bucket()
            .bucket(&minio.bucket)
            .send()
            .await
            .map_err(|e| Error::Unsupported(format!("creating the bucket: {e:?}")))?;
        minio.create_users(&setup, root)?;
        Ok(minio)
    }

    /// Start (or restart) the server process on the same port and data, and wait until it
    /// answers S3 requests.
    async fn run(&mut self) -> Result<(), Error> {
        let console = free_port()?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("server")
            .arg("--quiet")
            .arg(format!("--address={}:{}", self.host, self.port))
            .arg(format!("--console-address={}:{console}", self.host))
            .env("MINIO_ROOT_USER", ROOT_USER)
            .env("MINIO_ROOT_PASSWORD", ROOT_PASSWORD)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(certs) = &self.certs_dir {
            cmd.arg(format!("--certs-dir={}", certs.display()));
        }
        cmd.arg(&self.data_dir);
        let process = Process::spawn("minio", cmd, &self.log_dir.join("minio.log"))?;
        let client = self.root_client();
        wait_until(
            &format!("MinIO on {}", self.endpoint),
            Duration::from_secs(60),
            &[&process],
            &self.log_dir,
            || {
                let client = client.clone();
                // An answer from another binary's MinIO on the port is not this one's.
                let ours = listens(process.pid(), self.port);
                async move {
                    if !ours {
                        return Err("not listening on its port yet".to_string());
                    }
                    match client.list_buckets().send().await {
                        Ok(_) => Ok(Some(())),
                        Err(e) => Err(format!("{e:?}")),
                    }
                }
            },
        )
        .await?;
        self.process = Some(process);
        Ok(())
    }

    fn create_users(&self, setup: &Path, root: &Path) -> Result<(), Error> {
        let write_actions =
            r#""s3:PutObject","s3:AbortMultipartUpload","s3:ListMultipartUploadParts""#;
        // The writer may also delete: a schedule's retention deletes the objects it pruned.
        let objects = format!(
            r#"{{"Effect":"Allow","Action":["s3:GetObject","s3:DeleteObject",{write_actions}],"Resource":["arn:aws:s3:::{}/*"]}}"#,
            self.bucket
        );
        let write_only = format!(
            r#"{{"Effect":"Allow","Action":[{write_actions}],"Resource":["arn:aws:s3:::{}/*"]}}"#,
            self.bucket
        );
        // ListBucketMultipartUploads: retention aborts the uploads a killed agent left.
        let list = format!(
            r#"{{"Effect":"Allow","Action":["s3:ListBucket","s3:ListBucketMultipartUploads"],"Resource":["arn:aws:s3:::{}"]}}"#,
            self.bucket
        );
        let writer = format!(r#"{{"Version":"2012-10-17","Statement":[{objects},{list}]}}"#);
        let nolist = format!(r#"{{"Version":"2012-10-17","Statement":[{write_only}]}}"#);
        let writer_file = root.join("policy-writer.json");
        let nolist_file = root.join("policy-nolist.json");
        std::fs::write(&writer_file, writer).map_err(Error::io("writing a policy"))?;
        std::fs::write(&nolist_file, nolist).map_err(Error::io("writing a policy"))?;
        let mut cmd = Command::new(setup);
        cmd.arg(format!("-endpoint={}:{}", self.host, self.port))
            .arg(format!("-access-key={ROOT_USER}"))
            .arg(format!("-secret-key={ROOT_PASSWORD}"))
            .arg(format!("-policy=snapshot-writer={}", writer_file.display()))
            .arg(format!("-policy=snapshot-nolist={}", nolist_file.display()))
            .arg(format!(
                "-user={}:{}:snapshot-writer",
                self.writer.access_key, self.writer.secret_key
            ))
            .arg(format!(
                "-user={}:{}:snapshot-nolist",
                self.nolist.access_key, self.nolist.secret_key
            ));
        if let Some(ca) = &self.ca_file {
            cmd.arg("-tls").arg(format!("-ca={}", ca.display()));
        }
        let out = cmd.output().map_err(Error::io("running minio-setup"))?;
        if !out.status.success() {
            return Err(Error::Unsupported(format!(
                "minio-setup failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// SIGKILL the server (its data stays).
    pub fn kill(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
    }

    /// SIGSTOP the server (its process group): connections are still accepted by the kernel,
    /// but nothing is answered until [`Minio::resume`], like an S3 endpoint that hangs.
    pub fn stop(&self) -> Result<(), Error> {
        self.signal(nix::sys::signal::Signal::SIGSTOP)
    }

    /// SIGCONT after [`Minio::stop`].
    pub fn resume(&self) -> Result<(), Error> {
        self.signal(nix::sys::signal::Signal::SIGCONT)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) -> Result<(), Error> {
        let process = self
            .process
            .as_ref()
            .ok_or_else(|| Error::Unsupported("MinIO is not running".into()))?;
        let pid = i32::try_from(process.pid())
            .map_err(|_| Error::Unsupported(format!("pid {} out of range", process.pid())))?;
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal).map_err(|e| Error::Io {
            what: format!("sending {signal} to MinIO"),
            source: e.into(),
        })
    }

    /// Start it again on the same port and data.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.run().await
    }

    /// A client with the root credentials.
    pub fn root_client(&self) -> aws_sdk_s3::Client {
        self.client(&S3User {
            access_key: ROOT_USER.into(),
            secret_key: ROOT_PASSWORD.into(),
        })
    }

    pub fn client(&self, user: &S3User) -> aws_sdk_s3::Client {
        let trust = match &self.ca_file {
            Some(ca) => TrustStore::empty()
                .with_native_roots(false)
                .with_pem_certificate(std::fs::read(ca).unwrap_or_default()),
            None => TrustStore::default(),
        };
        let tls_context = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .unwrap_or_else(|e| panic!("TLS context: {e}"));
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .tls_context(tls_context)
            .build_https();
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(
                &user.access_key,
                &user.secret_key,
                None,
                None,
                "test",
            ))
            .endpoint_url(&self.endpoint)
            .force_path_style(true)
            .http_client(http)
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// Make the server a Service of namespace `ns`: a Service `name` without selector and an
    /// EndpointSlice with the server's address, as one exposes a server outside the cluster. The
    /// pod runner's DNS then resolves `<name>.<ns>.svc` in Pods. Returns the endpoint URL Pods
    /// dial, `http(s)://<name>.<ns>.svc:<port>`.
    pub async fn expose(&self, client: &kube::Client, ns: &str, name: &str) -> String {
        use k8s_openapi::api::core::v1::Service;
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        let _: Service = crate::harness::create(
            client,
            ns,
            serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                "spec": {"ports": [{"name": "s3", "port": self.port, "protocol": "TCP"}]}}),
        )
        .await;
        let _: EndpointSlice = crate::harness::create(
            client,
            ns,
            serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-host"), "labels": {
                    "kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": "etcd-operator-tests"}},
                "addressType": if self.host.is_ipv4() { "IPv4" } else { "IPv6" },
                "endpoints": [{"addresses": [self.host.to_string()], "conditions": {"ready": true}}],
                "ports": [{"name": "s3", "port": self.port, "protocol": "TCP"}]}),
        )
        .await;
        let scheme = if self.ca_file.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{name}.{ns}.svc:{}", self.port)
    }

    /// The object's size and user metadata (HeadObject) and its bytes, read as the root user.
    pub async fn object(
        &self,
        key: &str,
    ) -> (i64, std::collections::HashMap<String, String>, Vec<u8>) {
        let client = self.root_client();
        let head = client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("HeadObject {key}: {e:?}"));
        let body = client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetObject {key}: {e:?}"))
            .body
            .collect()
            .await
            .unwrap_or_else(|e| panic!("reading {key}: {e:?}"))
            .into_bytes();
        (
            head.content_length().unwrap_or(-1),
            head.metadata().cloned().unwrap_or_default(),
            body.to_vec(),
        )
    }

    /// The sha256 the checksum object `<key>.sha256` records for the object at `key`, read as
    /// the root user: `Some(hex)` only when the checksum object is bound to the object now stored
    /// (its `object-etag` metadata is the object's ETag) and holds one line `<hex>  <name>`.
    pub async fn recorded_sha256(&self, key: &str) -> Option<String> {
        let client = self.root_client();
        let head = client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .ok()?;
        let sidecar = client
            .get_object()
            .bucket(&self.bucket)
            .key(format!("{key}.sha256"))
            .send()
            .await
            .ok()?;
        let bound = sidecar
            .metadata()?
            .get("object-etag")?
            .trim_matches('"')
            .to_string();
        if Some(bound.as_str()) != head.e_tag().map(|e| e.trim_matches('"')) {
            return None;
        }
        let body = sidecar.body.collect().await.ok()?.into_bytes();
        let text = String::from_utf8(body.to_vec()).ok()?;
        let name = key.rsplit('/').next().unwrap_or(key);
        let (hex, rest) = text.split_once("  ")?;
        (rest == format!("{name}\n")).then(|| hex.to_string())
    }

    /// Every object in the bucket with its size.
    pub async fn objects(&self) -> Vec<(String, i64)> {
        let out = self
            .root_client()
            .list_objects_v2()
            .bucket(&self.bucket)
            .send()
            .await
            .unwrap_or_else(|e| panic!("listing objects: {e:?}"));
        out.contents()
            .iter()
            .map(|o| {
                (
                    o.key().unwrap_or_default().to_string(),
                    o.size().unwrap_or(-1),
                )
            })
            .collect()
    }

    /// Keys of the in-progress multipart uploads of `key`. MinIO lists uploads per object only:
    /// without the exact key as the prefix it answers with none.
    pub async fn uploads(&self, key: &str) -> Vec<String> {
        let out = self
            .root_client()
            .list_multipart_uploads()
            .bucket(&self.bucket)
            .prefix(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("listing multipart uploads: {e:?}"));
        out.uploads()
            .iter()
            .map(|u| u.key().unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.kill();
    }
}
