//! Verification of a Complete snapshot (docs/snapshots.md, "Verification"): whether its
//! verification Job is to run, and the `Verified` condition and `status.verification` from what
//! the Job reports. Pure.
//!
//! A snapshot is verified when it completed asking for it (`spec.verify`, default true): the
//! Complete status write sets `Verified=Unknown/Verifying`, and the condition stays Unknown until
//! the Job reports. Snapshots that completed before the operator verified (no `Verified`
//! condition) are left alone, so an upgrade does not start a Job for every stored snapshot.
//! A verification changes nothing it reads, so a lost Job is simply created again.

use api::conditions::reason;
use api::conditions::snapshot::VERIFIED;
use api::v1alpha2::{EtcdSnapshot, EtcdSnapshotStatus, SnapshotPhase, SnapshotVerification};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::agent_job::verify::verify_job_name;
use crate::agent_job::{AgentReport, JobView, VerifiedReport};
use crate::conditions::{set_condition, set_condition_status};

/// What a verification does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Nothing: not Complete, not asked for, or decided already.
    Idle,
    CreateJob,
    Running(String),
    Verified(VerifiedReport),
    /// The snapshot is bad: the `Verified=False` reason the agent found, and what differs.
    Bad {
        reason: String,
        message: String,
    },
    /// It could not be verified (the store unreachable, the Job failed, no cluster to take
    /// the etcd image from): `Verified=False/VerificationError`.
    Error(String),
}

/// Whether `snapshot` waits for its verification: Complete with `Verified=Unknown`.
pub fn pending(snapshot: &EtcdSnapshot) -> bool {
    let Some(status) = snapshot.status.as_ref() else {
        return false;
    };
    status.phase == Some(SnapshotPhase::Complete) && status.verifying()
}

/// Mark a snapshot completing now as waiting for its verification, if it asked for one.
pub fn begin(snapshot: &EtcdSnapshot, status: &mut EtcdSnapshotStatus, now: Timestamp) {
    if !snapshot.spec.verify() {
        return;
    }
    set_condition_status(
        &mut status.conditions,
        VERIFIED,
        "Unknown",
        reason::VERIFYING,
        format!(
            "the snapshot is stored; Job {} verifies it next",
            verify_job_name(&snapshot.name_any())
        ),
        snapshot.metadata.generation,
        now,
    );
}

/// The next step of `snapshot`'s verification, given its Job (`None`: there is none).
pub fn decide(snapshot: &EtcdSnapshot, job: Option<&JobView>) -> Verify {
    if !pending(snapshot) {
        return Verify::Idle;
    }
    let name = verify_job_name(&snapshot.name_any());
    let Some(j) = job else {
        return Verify::CreateJob;
    };
    let report = j.report.as_deref().and_then(AgentReport::parse);
    if j.succeeded {
        return match report.and_then(|r| r.verified) {
            Some(v) => Verify::Verified(v),
            None => Verify::Error(format!(
                "Job {name} succeeded but its agent reported no verification (termination \
                 message: {:?})",
                j.report.clone().unwrap_or_default()
            )),
        };
    }
    if let Some(failed) = &j.failed {
        return match report {
            Some(AgentReport {
                unverified: Some(u),
                ..
            }) => Verify::Bad {
                reason: u.reason,
                message: u.message,
            },
            Some(AgentReport { error: Some(e), .. }) => {
                Verify::Error(format!("Job {name} failed ({failed}): {e}"))
            }
            _ => Verify::Error(format!(
                "Job {name} failed ({failed}): {}",
                j.report.clone().unwrap_or_default()
            )),
        };
    }
    Verify::Running(match &j.report {
        Some(last) if !j.active => format!("Job {name} is retrying; last attempt: {last}"),
        _ if j.active => format!("Job {name} is verifying the snapshot"),
        _ => format!("Job {name} created; waiting for its Pod"),
    })
}

/// The reasons a bad snapshot may carry; anything else the agent says is reported as an error
/// (a newer agent's reason must not become a condition reason this operator does not know).
fn bad_reason(agent: &str) -> &'static str {
    [
        reason::CHECKSUM_MISMATCH,
        reason::SNAPSHOT_RESTORE_FAILED,
        reason::HASH_KV_MISMATCH,
    ]
    .into_iter()
    .find(|r| *r == agent)
    .unwrap_or(reason::VERIFICATION_ERROR)
}

/// The message of a verification whose content was not compared.
pub fn not_compared(v: &VerifiedReport) -> String {
    format!(
        "sha256 and size match the save and the restored copy opens and hashes (hashkv {} at \
         revision {}), but its content was not compared: the save recorded no hashkv (the \
         member did not answer HashKV, or the snapshot streamed from another member than the \
         one that did; status.hashKV is unset), so nothing says the data equals the cluster's. \
         Take a new snapshot for one that is compared",
        v.hash, v.revision
    )
}

/// The status after `step`.
pub fn render(snapshot: &EtcdSnapshot, step: &Verify, now: Timestamp) -> EtcdSnapshotStatus {
    let mut status = snapshot.status.clone().unwrap_or_default();
    let generation = snapshot.metadata.generation;
    let conditions = &mut status.conditions;
    let name = verify_job_name(&snapshot.name_any());
    match step {
        Verify::Idle => {}
        Verify::CreateJob => set_condition_status(
            conditions,
            VERIFIED,
            "Unknown",
            reason::VERIFYING,
            format!("Job {name} created"),
            generation,
            now,
        ),
        Verify::Running(message) => set_condition_status(
            conditions,
            VERIFIED,
            "Unknown",
            reason::VERIFYING,
            message.clone(),
            generation,
            now,
        ),
        Verify::Verified(v) => {
            let (why, message) = if v.compared {
                (
                    reason::SNAPSHOT_VERIFIED,
                    format!(
                        "sha256 and size match the save, the snapshot restores, and its hashkv \
                         at revision {} is {}, as the cluster reported at save time",
                        v.revision, v.hash
                    ),
                )
            } else {
                (reason::HASH_KV_NOT_COMPARED, not_compared(v))
            };
            set_condition(conditions, VERIFIED, true, why, message, generation, now);
            status.verification = Some(SnapshotVerification {
                verified_at: Time(now),
                revision: v.revision,
                hash: v.hash,
            });
        }
        Verify::Bad { reason: r, message } => set_condition(
            conditions,
            VERIFIED,
            false,
            bad_reason(r),
            message.clone(),
            generation,
            now,
        ),
        Verify::Error(message) => set_condition(
            conditions,
            VERIFIED,
            false,
            reason::VERIFICATION_ERROR,
            message.clone(),
            generation,
            now,
        ),
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{EtcdSnapshotSpec, LocalReference, SnapshotArtifact, SnapshotDestination};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn complete(verify: Option<bool>) -> EtcdSnapshot {
        let mut s = EtcdSnapshot::new(
            "nightly",
            EtcdSnapshotSpec {
                cluster_ref: LocalReference { name: "c".into() },
                destination: SnapshotDestination::default(),
                verify,
            },
        );
        let mut status = EtcdSnapshotStatus {
            phase: Some(SnapshotPhase::Complete),
            artifact: Some(SnapshotArtifact::default()),
            ..Default::default()
        };
        begin(&s, &mut status, ts(0));
        s.status = Some(status);
        s
    }

    fn job(succeeded: bool, failed: Option<&str>, report: Option<&str>) -> JobView {
        JobView {
            active: !succeeded && failed.is_none(),
            succeeded,
            failed: failed.map(str::to_string),
            report: report.map(str::to_string),
        }
    }

    fn verified_condition(s: &EtcdSnapshotStatus) -> (String, String, String) {
        let c = s.conditions.iter().find(|c| c.type_ == VERIFIED).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn a_completed_snapshot_waits_for_verification_unless_it_asked_for_none() {
        let s = complete(None);
        assert!(pending(&s));
        assert_eq!(decide(&s, None), Verify::CreateJob);
        let off = complete(Some(false));
        assert!(!pending(&off));
        assert_eq!(decide(&off, None), Verify::Idle);
        assert!(off.status.unwrap().conditions.is_empty());
    }

    #[test]
    fn a_snapshot_completed_before_verification_existed_is_left_alone() {
        let mut s = complete(None);
        s.status.as_mut().unwrap().conditions.clear();
        assert_eq!(decide(&s, None), Verify::Idle);
    }

    #[test]
    fn a_lost_verification_job_is_created_again() {
        let mut s = complete(None);
        s.status = Some(render(&s, &Verify::Running("x".into()), ts(1)));
        assert_eq!(decide(&s, None), Verify::CreateJob);
    }

    #[test]
    fn the_agents_verification_sets_verified_true_with_the_revision_and_hash() {
        let s = complete(None);
        let report = r#"{"verified":{"revision":42,"hash":7,"compared":true}}"#;
        let step = decide(&s, Some(&job(true, None, Some(report))));
        let status = render(&s, &step, ts(9));
        let (st, r, m) = verified_condition(&status);
        assert_eq!((st.as_str(), r.as_str()), ("True", "SnapshotVerified"));
        assert!(m.contains("revision 42"), "{m}");
        let v = status.verification.unwrap();
        assert_eq!((v.revision, v.hash, v.verified_at), (42, 7, Time(ts(9))));
        // Decided: nothing more happens.
        let mut done = s.clone();
        done.status = Some(render(&s, &step, ts(9)));
        assert_eq!(decide(&done, None), Verify::Idle);
    }

    #[test]
    fn a_verification_without_a_recorded_hashkv_says_the_content_was_not_compared() {
        let s = complete(None);
        let report = r#"{"verified":{"revision":42,"hash":7,"compared":false}}"#;
        let step = decide(&s, Some(&job(true, None, Some(report))));
        let status = render(&s, &step, ts(9));
        let (st, r, m) = verified_condition(&status);
        // Still usable (auto-recovery and recoveries by name rely on Verified=True), but not
        // the reason that claims the data equals the cluster's.
        assert_eq!((st.as_str(), r.as_str()), ("True", "HashKVNotCompared"));
        assert_eq!(status.verified(), Some(true));
        for part in ["not compared", "no hashkv", "revision 42", "opens"] {
            assert!(m.contains(part), "{part}: {m}");
        }
    }

    #[test]
    fn a_bad_snapshot_reads_verified_false_with_the_agents_reason_and_message() {
        let s = complete(None);
        let report = r#"{"unverified":{"reason":"ChecksumMismatch","message":"s3://b/k now has sha256:cd"}}"#;
        let step = decide(
            &s,
            Some(&job(false, Some("PodFailurePolicy"), Some(report))),
        );
        let (st, r, m) = verified_condition(&render(&s, &step, ts(3)));
        assert_eq!((st.as_str(), r.as_str()), ("False", "ChecksumMismatch"));
        assert!(m.contains("sha256:cd"), "{m}");
        // An unknown reason from the agent is not invented as a condition reason.
        let odd = r#"{"unverified":{"reason":"Gremlins","message":"m"}}"#;
        let step = decide(&s, Some(&job(false, Some("x"), Some(odd))));
        assert_eq!(
            verified_condition(&render(&s, &step, ts(3))).1,
            "VerificationError"
        );
    }

    #[test]
    fn a_job_that_could_not_verify_is_a_verification_error_not_a_bad_snapshot() {
        let s = complete(None);
        let report = r#"{"error":"GetObject s3://b/k: access denied"}"#;
        let step = decide(
            &s,
            Some(&job(false, Some("BackoffLimitExceeded"), Some(report))),
        );
        let status = render(&s, &step, ts(3));
        let (st, r, m) = verified_condition(&status);
        assert_eq!((st.as_str(), r.as_str()), ("False", "VerificationError"));
        assert!(
            m.contains("access denied") && m.contains("nightly-verify"),
            "{m}"
        );
        assert!(status.verification.is_none());
        assert_eq!(status.verified(), Some(false));
    }

    #[test]
    fn a_running_job_keeps_verified_unknown() {
        let s = complete(None);
        let step = decide(&s, Some(&job(false, None, None)));
        let status = render(&s, &step, ts(2));
        assert_eq!(verified_condition(&status).0, "Unknown");
        assert_eq!(status.verified(), None);
    }
}
