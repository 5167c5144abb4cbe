//! Evidence that a cluster kept its quorum through a fault: etcd's own member list and the
//! member Pods' readiness, sampled side by side every [`PERIOD`] while the fault lasts
//! ([`watch`]), each change kept. A test then asserts on the timeline: never more voters than the
//! docs say, a majority of the voters Ready in every sample, the survivors voters throughout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::e2e::{member_client, pod_ready};

/// How often the member list and the Pods are read.
pub const PERIOD: Duration = Duration::from_millis(300);

/// One moment of a cluster: etcd's member list (as a Ready member answered it) and which member
/// Pods were Ready (and not being deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub voters: Vec<String>,
    pub learners: Vec<String>,
    pub ready: Vec<String>,
}

impl Sample {
    /// The voters whose Pod is Ready.
    pub fn ready_voters(&self) -> usize {
        self.voters
            .iter()
            .filter(|v| self.ready.contains(v))
            .count()
    }

    /// A majority of the voters have a Ready Pod: etcd can commit without any other.
    pub fn has_majority_ready(&self) -> bool {
        self.ready_voters() > self.voters.len() / 2
    }
}

/// A running sampler; [`Watch::stop`] ends it and hands over the timeline.
pub struct Watch {
    timeline: Arc<Mutex<Vec<Sample>>>,
    /// Samples where no Ready member answered the member list within 2 s (an election, a lost
    /// quorum): they carry the last list etcd gave (the membership cannot change without a
    /// quorum) with the Pods' readiness of the moment, so a lost majority still shows.
    unanswered: Arc<Mutex<u64>>,
    task: JoinHandle<()>,
}

/// Start sampling the members of `cluster` in `ns`.
pub fn watch(client: Client, ns: &str, cluster: &str) -> Watch {
    let timeline: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let unanswered: Arc<Mutex<u64>> = Arc::default();
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let selector = api::labels::cluster_selector(cluster);
    let task = {
        let (timeline, unanswered) = (timeline.clone(), unanswered.clone());
        tokio::spawn(async move {
            let mut last_list: Option<MemberList> = None;
            loop {
                if let Some((ready, list)) = sample(&pods, &selector).await {
                    match list {
                        Some(list) => last_list = Some(list),
                        None => {
                            if let Ok(mut n) = unanswered.lock() {
                                *n += 1;
                            }
                        }
                    }
                    if let Some((voters, learners)) = last_list.clone() {
                        let s = Sample {
                            voters,
                            learners,
                            ready,
                        };
                        if let Ok(mut t) = timeline.lock() {
                            if t.last() != Some(&s) {
                                t.push(s);
                            }
                        }
                    }
                }
                tokio::time::sleep(PERIOD).await;
            }
        })
    };
    Watch {
        timeline,
        unanswered,
        task,
    }
}

impl Watch {
    /// Stop sampling: every distinct sample in order, and how many samples got no member list.
    pub fn stop(self) -> (Vec<Sample>, u64) {
        self.task.abort();
        let timeline = self.timeline.lock().map(|t| t.clone()).unwrap_or_default();
        let unanswered = self.unanswered.lock().map(|n| *n).unwrap_or_default();
        (timeline, unanswered)
    }
}

/// etcd's member list: (voter names, learner names), each sorted.
type MemberList = (Vec<String>, Vec<String>);

/// The Ready member Pods (sorted names) and etcd's member list as the first of them to answer
/// gave it: (voters, learners), `None` when none answered. `None` when the Pods could not be
/// listed.
async fn sample(pods: &Api<Pod>, selector: &str) -> Option<(Vec<String>, Option<MemberList>)> {
    let listed = pods
        .list(&ListParams::default().labels(selector))
        .await
        .ok()?
        .items;
    let ready: Vec<Pod> = listed
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .collect();
    let mut names: Vec<String> = ready.iter().map(|p| p.name_any()).collect();
    names.sort();
    for pod in &ready {
        let Ok(mut etcd) = member_client(pod).await else {
            continue;
        };
        if let Ok(Ok(list)) = tokio::time::timeout(Duration::from_secs(2), etcd.member_list()).await
        {
            let (learners, voters): (Vec<_>, Vec<_>) =
                list.members().iter().partition(|m| m.is_learner());
            let sorted = |ms: Vec<&etcd_client::Member>| -> Vec<String> {
                let mut n: Vec<String> = ms.iter().map(|m| m.name().to_string()).collect();
                n.sort();
                n
            };
            return Some((names, Some((sorted(voters), sorted(learners)))));
        }
    }
    Some((names, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(voters: &[&str], ready: &[&str]) -> Sample {
        Sample {
            voters: voters.iter().map(|v| v.to_string()).collect(),
            learners: Vec::new(),
            ready: ready.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn a_majority_counts_only_ready_voters() {
        assert!(s(&["a", "b", "c"], &["a", "b"]).has_majority_ready());
        assert!(!s(&["a", "b", "c"], &["a", "d"]).has_majority_ready());
        assert!(s(&["a", "b"], &["a", "b"]).has_majority_ready());
        assert!(!s(&["a", "b"], &["a"]).has_majority_ready());
        assert!(!s(&[], &["a"]).has_majority_ready());
    }
}
