//! The test environment: which binaries to run ([`testbins`]), the PKI they trust ([`pki`]), how
//! children are started, contained and logged ([`process`], [`logs`]), the control plane built
//! from them ([`control_plane`]), cert-manager running against it ([`cert_manager`]), standalone
//! etcd members ([`etcd`]) and a MinIO S3 server ([`minio`]).
//!
//! Owns every process the tests start. Must not reach anything but loopback: every component binds
//! to 127.0.0.1 and is dialled there.

pub mod cert_manager;
pub mod control_plane;
pub mod etcd;
pub mod logs;
pub mod minio;
pub mod pki;
mod ports;
pub mod process;
pub mod testbins;

use std::path::PathBuf;
use std::time::Duration;

pub use cert_manager::CertManager;
pub use control_plane::{
    ControlPlane, ControlPlaneBuilder, ControllerIdentity, KubectlOutput, NodeLifecycle,
};
pub use testbins::{
    Kubernetes, PartState, Testbins, CERT_MANAGER, CERT_MANAGER_CRDS, TESTBINS_ENV,
};

/// Why the test environment could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{TESTBINS_ENV} is not set: the tests run the Kubernetes and etcd binaries built by \
         `make testbins` (tools/testbins/build.sh); run `make testbins` and then \
         `{TESTBINS_ENV}=$(bash tools/testbins/build.sh --print-dir) cargo test ...`, or use `make test`"
    )]
    TestbinsUnset,
    #[error(
        "{TESTBINS_ENV}={dir} is not a directory: run `make testbins` (or point {TESTBINS_ENV} at \
         the directory `bash tools/testbins/build.sh --print-dir` prints)"
    )]
    TestbinsNotADirectory { dir: PathBuf },
    #[error(
        "{part}/{binary} is missing from the test binaries in {dir} ({reason}): run `make testbins`"
    )]
    BinaryMissing {
        dir: PathBuf,
        part: String,
        binary: String,
        reason: String,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("minting the control plane's certificates: {0}")]
    Pki(#[from] rcgen::Error),
    #[error("{what}: {detail}")]
    Kube {
        what: String,
        /// The apiserver's own message for an API error (kube's Display adds the whole Status).
        detail: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the admin kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("{component} exited ({status}) {when}; log {log}:\n{tail}")]
    Exited {
        component: String,
        status: String,
        when: String,
        log: PathBuf,
        tail: String,
    },
    #[error("timed out after {timeout:?} waiting for {what} (last: {last}); logs in {log_dir}:\n{tails}")]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
        log_dir: PathBuf,
        tails: String,
    },
    #[error("kubectl {args} failed ({status}):\n{stderr}")]
    Kubectl {
        args: String,
        status: String,
        stderr: String,
    },
    /// The chart rendered something the harness cannot use, or its objects did not take effect.
    #[error("{what}: {message}")]
    Chart { what: String, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("the test binary's shared control plane did not start: {0}")]
    SharedStartFailed(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    pub(crate) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| {
            let detail = match &source {
                kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
                other => other.to_string(),
            };
            Error::Kube {
                what,
                detail,
                source,
            }
        }
    }
}
