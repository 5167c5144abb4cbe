//! TLS material for the operator's binaries: PEM loading ([`pem`]), a rustls server config whose
//! certificate is re-resolved on every handshake ([`server`]), a reloader that follows a mounted
//! Secret as the kubelet rotates it ([`reload`]), client configs for dialing TLS servers
//! ([`client`]), certificate checks before use ([`verify`]), and — behind the `mint` feature, for tests only — a throw-away CA ([`mint`]).
//!
//! Every config is built on the aws-lc-rs provider and allows TLS 1.2 and 1.3 only. This crate
//! knows nothing about Kubernetes objects or etcd; callers pass it paths and bytes.

pub mod client;
#[cfg(feature = "mint")]
pub mod mint;
pub mod pem;
pub mod reload;
pub mod server;
pub mod verify;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

pub use reload::{CertReloader, ReloadOutcome, ReloadStats};
pub use server::CertResolver;

/// The one crypto provider of the project: aws-lc-rs.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Install aws-lc-rs as the process-wide default provider (call once, at the top of `main`).
/// Installing twice is harmless: the first installation wins, and it is the same provider.
pub fn install_default_provider() {
    // `Err` only means a provider is already installed; every config here names its provider
    // explicitly anyway.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
