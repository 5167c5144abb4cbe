//! `kubectl etcd defrag <cluster>`: an EtcdDefrag with a unique name, followed until it is
//! Complete (each member's outcome printed) or Failed.

use std::time::Duration;

use api::v1alpha2::{
    DefragOutcome, DefragPhase, DefragRule, EtcdCluster, EtcdDefrag, EtcdDefragSpec, LocalReference,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use crate::error::Result;
use crate::follow::{follow, parse_timeout, with_reason, Progress};
use crate::format::bytes;
use crate::objects::Objects;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// The EtcdCluster.
    pub cluster: String,
    /// Defragment every member (spec.rule.all). Default: the operator's gate, members whose
    /// reclaimable space exceeds 200Mi.
    #[arg(long, conflicts_with_all = ["free_space_above", "quota_usage_above", "min_reclaim"])]
    pub all: bool,
    /// Defragment members whose reclaimable space exceeds this (spec.rule.freeSpaceAbove).
    #[arg(long, value_name = "QUANTITY")]
    pub free_space_above: Option<String>,
    /// Above this share of the backend quota, the floor drops to --min-reclaim
    /// (spec.rule.quotaUsageAbove, e.g. 80%).
    #[arg(long, value_name = "PERCENT")]
    pub quota_usage_above: Option<String>,
    /// The least reclaimable space worth a defrag (spec.rule.minReclaim).
    #[arg(long, value_name = "QUANTITY")]
    pub min_reclaim: Option<String>,
    /// Create it and return without following it.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to follow it.
    #[arg(long, default_value = "10m", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// The rule the flags say; none: the operator's default gate.
pub fn rule(args: &Args) -> Option<DefragRule> {
    if args.all {
        return Some(DefragRule {
            all: Some(true),
            ..Default::default()
        });
    }
    let rule = DefragRule {
        all: None,
        free_space_above: args.free_space_above.clone().map(Quantity),
        quota_usage_above: args.quota_usage_above.clone(),
        min_reclaim: args.min_reclaim.clone().map(Quantity),
    };
    (rule != DefragRule::default()).then_some(rule)
}

/// Where a run stands: Complete with each member's outcome, Failed with its Ready message and
/// the members that failed.
pub fn judge(d: &EtcdDefrag) -> Progress {
    let st = d.status.clone().unwrap_or_default();
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == api::conditions::defrag::READY)
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default();
    let members: Vec<String> = st
        .members
        .iter()
        .map(|m| {
            let sizes = match (m.db_size_before, m.db_size_after) {
                (Some(b), Some(a)) => format!(" {} -> {}", bytes(b), bytes(a)),
                _ => String::new(),
            };
            let reason = m
                .reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            let outcome = m.outcome.map_or("-".to_string(), |o| format!("{o:?}"));
            format!("\n  {}: {outcome}{sizes}{reason}", m.name)
        })
        .collect();
    match st.phase {
        Some(DefragPhase::Complete) => Progress::Done(format!(
            "Complete, {} defragmented{}",
            st.defragmented.unwrap_or(0),
            members.concat()
        )),
        Some(DefragPhase::Failed) => Progress::Failed(format!("{ready}{}", members.concat())),
        phase => {
            let done = st
                .members
                .iter()
                .filter(|m| m.outcome.is_some_and(|o| o != DefragOutcome::Failed))
                .count();
            Progress::Going(with_reason(
                format!("{:?}, {done} members done", phase.unwrap_or_default()),
                &ready,
            ))
        }
    }
}

pub async fn run(o: &Objects, args: &Args) -> Result<()> {
    let cluster: EtcdCluster = o.get(&args.cluster).await?;
    let mut defrag = EtcdDefrag::new(
        "",
        EtcdDefragSpec {
            cluster_ref: LocalReference {
                name: cluster.name_any(),
            },
            rule: rule(args),
            ttl_seconds_after_finished: None,
        },
    );
    defrag.metadata.name = None;
    defrag.metadata.generate_name = Some(format!("{}-defrag-", args.cluster));
    let created = o.create(&defrag).await?;
    let name = created.name_any();
    println!("EtcdDefrag {name} created (cluster {})", args.cluster);
    if args.no_wait {
        return Ok(());
    }
    follow(o, &name, args.timeout, judge).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{DefragMemberStatus, EtcdDefragStatus};

    #[test]
    fn all_or_the_gates_flags_or_the_operators_default() {
        let all = Args {
            all: true,
            ..Default::default()
        };
        assert_eq!(rule(&all).and_then(|r| r.all), Some(true));
        let gate = Args {
            free_space_above: Some("1Mi".into()),
            quota_usage_above: Some("80%".into()),
            ..Default::default()
        };
        let r = rule(&gate).expect("rule");
        assert_eq!(r.free_space_above, Some(Quantity("1Mi".into())));
        assert_eq!(r.quota_usage_above.as_deref(), Some("80%"));
        assert_eq!(rule(&Args::default()), None);
    }

    #[test]
    fn a_run_is_followed_to_each_members_outcome() {
        let mut d = EtcdDefrag::new("demo-defrag-x", EtcdDefragSpec::default());
        d.status = Some(EtcdDefragStatus {
            phase: Some(DefragPhase::Complete),
            defragmented: Some(1),
            members: vec![
                DefragMemberStatus {
                    name: "demo-a".into(),
                    outcome: Some(DefragOutcome::Defragmented),
                    db_size_before: Some(4 * 1024 * 1024),
                    db_size_after: Some(1024 * 1024),
                    ..Default::default()
                },
                DefragMemberStatus {
                    name: "demo-b".into(),
                    outcome: Some(DefragOutcome::Skipped),
                    reason: Some("reclaimable 1.0 MiB below 200Mi".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        assert_eq!(
            judge(&d),
            Progress::Done(
                "Complete, 1 defragmented\n  demo-a: Defragmented 4.0 MiB -> 1.0 MiB\n  demo-b: Skipped (reclaimable 1.0 MiB below 200Mi)".into()
            )
        );
        if let Some(st) = d.status.as_mut() {
            st.phase = Some(DefragPhase::Running);
        }
        assert_eq!(judge(&d), Progress::Going("Running, 2 members done".into()));
    }
}
