//! Planning before the cluster has formed: create the seed, complete it, latch the cluster ID
//! once the seed is alone in etcd. Pure; the holds (deadline, TLS, auth) are decided before.

use super::*;

pub(super) fn plan_bootstrap(
    o: &Observed<'_>,
    target: &ObservedSpec,
    live: &[&MemberView],
    peer_url: &dyn Fn(&str) -> String,
    facts: &mut Facts,
) -> Action {
    if target.replicas == 0 {
        return Action::Wait("cluster declared paused from the start; not bootstrapping".into());
    }
    let Some(seed) = live.iter().find(|m| m.bootstrap) else {
        if live.is_empty() {
            return Action::CreateSeed;
        }
        return Action::Wait(
            "members exist but none is the seed; waiting for them to be removed".into(),
        );
    };
    if seed.pending {
        let url = peer_url(&seed.name);
        return Action::CompletePending {
            member: seed.name.clone(),
            peer_url: url.clone(),
            already_added: true,
            initial_cluster_after_add: format!("{}={url}", seed.name),
        };
    }
    if seed.pod.is_none() {
        facts.seed_without_pod = true;
        return Action::Wait(format!(
            "waiting for bootstrap member to form cluster: the seed {} has no Pod yet",
            seed.name
        ));
    }
    match &o.etcd {
        EtcdView::Members {
            cluster_id,
            members,
        } => {
            let url = peer_url(&seed.name);
            match members.as_slice() {
                [only] if only.name == seed.name || only.peer_urls.contains(&url) => {
                    Action::LatchClusterId {
                        cluster_id: *cluster_id,
                        seed: seed.name.clone(),
                        member_id: only.id,
                    }
                }
                _ => Action::Wait(format!(
                    "the seed {} reports {} members; the cluster ID is latched only when the seed is alone",
                    seed.name,
                    members.len()
                )),
            }
        }
        _ => Action::Wait(format!(
            "waiting for bootstrap member to form cluster: the seed {} is not reachable yet",
            seed.name
        )),
    }
}
