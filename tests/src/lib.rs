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
pub mod faults;
pub mod faults_env;
pub mod harness;
pub mod helm;
pub mod install;
pub mod monitoring;
pub mod node;
pub mod operator;
pub mod podrunner;
pub mod quorum;
pub mod recovery;
pub mod rollout;
pub mod tls;
pub mod webhook;
pub mod workload;

/// `impl Debug` for a struct that shows only what it names: `debug_fields!(Slot, |s| { "n": s.n })`
/// (the label, then an expression over `s`, the value). For the structs that hold handles (locks,
/// temporary directories, child processes) whose own `Debug` says nothing useful.
#[macro_export]
macro_rules! debug_fields {
    ($ty:ident, |$this:ident| { $($label:literal: $value:expr),* $(,)? }) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let $this = self;
                let mut out = f.debug_struct(stringify!($ty));
                $(out.field($label, &$value);)*
                out.finish()
            }
        }
    };
}

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
