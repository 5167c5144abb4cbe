//! Why the planner changes nothing this reconcile: a typed [`Hold`], found once in the one
//! precedence (an EtcdRecovery → fields not supported → progress deadline → cert-manager → TLS Secrets → root auth
//! → cluster ID mismatch). The planner waits on it; the status's Available and Progressing
//! conditions read it instead of deriving it again. Pure.

use super::{AuthProblem, Facts, Phase};

/// What holds every membership change, the first in precedence when several do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// An EtcdRecovery (named) holds the cluster ([`api::v1alpha2::RECOVERY_ANNOTATION`]): it
    /// stops, restarts and deletes members itself, so the cluster controller must not fight it.
    Recovering(String),
    /// Fields of the spec this operator version cannot act on yet; the seed is not created.
    Unsupported(Vec<&'static str>),
    /// The progress deadline passed before the cluster ID was latched: terminal.
    BootstrapFailed,
    /// The progress deadline passed after it: parked until the spec is edited.
    DeadlineExceeded,
    /// The cluster asks for cert-manager Certificates but cert-manager is not installed.
    CertManagerMissing,
    /// A Secret of `spec.tls` is missing or unusable (the message names it); a cert-manager
    /// Secret not issued yet is a wait, not a fault.
    TlsSecret {
        problem: String,
        waiting_for_certificate: bool,
    },
    /// Root auth stands in the way.
    Auth(AuthProblem),
    /// etcd answers with another cluster ID than the one latched: whatever answers is not the
    /// cluster this EtcdCluster formed, and changing its membership could only do harm.
    ClusterIdMismatch { latched: String, answered: String },
}

impl Hold {
    /// The hold of a plan with these facts and this phase (the phase says whether the deadline
    /// expired), if any. The one place the precedence is written.
    pub fn first(facts: &Facts, phase: Phase) -> Option<Hold> {
        if let Some(recovery) = &facts.recovery {
            return Some(Hold::Recovering(recovery.clone()));
        }
        if !facts.unsupported.is_empty() {
            return Some(Hold::Unsupported(facts.unsupported.clone()));
        }
        match phase {
            Phase::BootstrapFailed => return Some(Hold::BootstrapFailed),
            Phase::DeadlineExceeded => return Some(Hold::DeadlineExceeded),
            Phase::Progressing | Phase::Reconciled => {}
        }
        if facts.cert_manager_missing {
            return Some(Hold::CertManagerMissing);
        }
        if let Some(problem) = &facts.tls_secret_problem {
            return Some(Hold::TlsSecret {
                problem: problem.clone(),
                waiting_for_certificate: facts.waiting_for_certificate,
            });
        }
        if let Some(problem) = &facts.auth_problem {
            return Some(Hold::Auth(problem.clone()));
        }
        if let Some((latched, answered)) = &facts.cluster_id_mismatch {
            return Some(Hold::ClusterIdMismatch {
                latched: latched.clone(),
                answered: answered.clone(),
            });
        }
        None
    }

    /// The message of the planner's `Wait` (the runbook's key signals are these, logged).
    pub fn wait_message(&self) -> String {
        match self {
            Hold::Recovering(recovery) => format!(
                "EtcdRecovery {recovery} holds the cluster; no membership change is made until it lets go"
            ),
            Hold::Unsupported(fields) => format!(
                "not bootstrapping: this operator version does not implement {} yet",
                fields.join(", ")
            ),
            Hold::BootstrapFailed | Hold::DeadlineExceeded => {
                "the progress deadline passed; edit the spec to retry".into()
            }
            Hold::CertManagerMissing => "cert-manager is not installed".into(),
            Hold::TlsSecret { problem, .. } => {
                format!("waiting for a usable TLS Secret: {problem}")
            }
            Hold::Auth(problem) => format!("{}: {}", problem.reason, problem.message),
            Hold::ClusterIdMismatch { latched, answered } => format!(
                "etcd answers with cluster ID {answered}, not the latched {latched}; no membership change is made"
            ),
        }
    }
}
