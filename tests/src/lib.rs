//! Test support for the API-layer and end-to-end suites: a real Kubernetes control plane (etcd,
//! kube-apiserver, optionally kube-controller-manager and kube-scheduler) started from the binaries
//! `tools/testbins/build.sh` builds, and helpers that judge the shared validation corpus against it.
//!
//! Nothing here runs without `ETCD_OPERATOR_TESTBINS`; unit tests of the other crates never depend
//! on this crate.

pub mod adopt;
pub mod backup;
pub mod chart_rbac;
pub mod corpus;
pub mod e2e;
pub mod env;
pub mod harness;
pub mod helm;
pub mod install;
pub mod operator;
pub mod podrunner;
pub mod rollout;
pub mod tls;
pub mod webhook;

/// `unwrap` for test code that shows the error's `Display` (our errors carry log tails and
/// multi-line messages that `Debug` would escape into one line).
pub trait OrPanic<T> {
    fn or_panic(self) -> T;
}

impl<T, E: std::fmt::Display> OrPanic<T> for Result<T, E> {
    #[track_caller]
    fn or_panic(self) -> T {
        match self {
            Ok(value) => value,
            Err(e) => panic!("{e}"),
        }
    }
}
