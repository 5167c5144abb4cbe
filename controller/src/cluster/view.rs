//! What the cluster planner sees of each member: its EtcdMember, its Pod and where its data
//! lives. Plain facts gathered by the reconciler (`reconcile`, `data_home`), read by the planner
//! (`plan`) and by the rules beside it (`ca_set`), so none of those depend on each other for them.

use k8s_openapi::jiff::Timestamp;

/// A member as the planner sees it: its CR, its Pod, and what etcd says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub name: String,
    pub created: Timestamp,
    pub deleting: bool,
    pub bootstrap: bool,
    pub dormant: bool,
    /// `spec.initialCluster` is empty: the CR exists but the member was not yet added to etcd.
    pub pending: bool,
    pub memory: bool,
    /// `status.isVoter` as last recorded (etcd's own list wins when it is known).
    pub voter: bool,
    /// `spec.version`: the version the member was created with.
    pub version: String,
    /// `status.podUID`: the Pod this member last ran in.
    pub recorded_pod_uid: Option<String>,
    /// The legacy headless Service of a member adopted from the aenix operator; `None` for a
    /// native member (it resolves under the cluster's own).
    pub service: Option<String>,
    pub pod: Option<PodView>,
    /// A PVC member whose claim the member controller had created (`status.pvcName`) is gone:
    /// its data is lost, and restarting it empty under its etcd member ID would rejoin Raft with
    /// an empty log.
    pub data_lost: bool,
    /// [`api::labels::TRUST_BUNDLE_ANNOTATION`] on the EtcdMember: the CA bundles its Pod is to
    /// run with. `None` on a member created before the operator recorded it.
    pub trust_bundle: Option<String>,
    /// [`api::labels::TRUSTED_CAS_ANNOTATION`] on the EtcdMember: the CA set of that bundle.
    pub trusted_cas: Option<String>,
    /// [`crate::template::hash`] of the member's spec: the template its Pod is to run.
    pub template_hash: String,
    /// Where the member's data lives and whether it can still be reached: looked up only for a
    /// member whose Pod cannot run (unschedulable or stuck Terminating), [`DataHome::Unknown`]
    /// otherwise.
    pub data_home: DataHome,
    /// [`api::labels::IMAGE_REPOSITORY_ANNOTATION`] on the EtcdMember: the etcd image repository
    /// its Pod is to run. `None` on a member created before the operator recorded it.
    pub image_repository: Option<String>,
}

/// Where a member's data lives, as far as it decides whether a member whose Pod cannot run may be
/// replaced: only data that is gone or unreachable for good is grounds for a replacement (which
/// removes the member from etcd and deletes its PVC).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DataHome {
    /// Not looked up (the member's Pod runs), or it could not be established (an API error, a
    /// claim not bound yet, a Memory member whose Pod has no Node): never grounds for a
    /// replacement.
    #[default]
    Unknown,
    /// The data is where a Pod can reach it: the Node that holds it (the member's Node-local
    /// volume's, or for a volume no single Node holds, the Pod's) exists and is Ready, or the
    /// volume is network storage that a Pod can mount on any Node.
    Reachable,
    /// The Node that holds the data (or runs the Pod) exists but has not been Ready since
    /// `since`: a dead machine whose Node object nobody deleted, or a network partition.
    NodeNotReady { node: String, since: Timestamp },
    /// The member's volume is pinned to a Node (its PV's node affinity names one host) that no
    /// longer exists: the data went with it.
    NodeGone { node: String },
    /// The member's PVC is bound to a PV that no longer exists (the claim is `Lost`).
    VolumeGone { volume: String },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub uid: String,
    pub ready: bool,
    pub restart_count: i32,
    /// The etcd container's last termination was an OOM kill.
    pub oom_killed: bool,
    /// The Pod cannot be scheduled (`PodScheduled=False/Unschedulable`): since when, and the
    /// scheduler's message (a Node gone with the member's local volume, a lost PVC, ...).
    pub unschedulable: Option<(Timestamp, String)>,
    /// The Pod's deletion was requested (an eviction, a drain) and it has not gone yet.
    pub terminating: bool,
    /// The etcd container is waiting in `CrashLoopBackOff` right now.
    pub crash_loop_backoff: bool,
    /// When the etcd container last terminated (`lastState.terminated.finishedAt`).
    pub last_exit: Option<Timestamp>,
    /// [`api::labels::TRUST_BUNDLE_ANNOTATION`] on the Pod: the CA bundles it started with.
    pub trust_bundle: Option<String>,
    /// [`api::labels::TRUSTED_CAS_ANNOTATION`] on the Pod: the CAs it started trusting.
    pub trusted_cas: Option<String>,
    /// When the etcd container started (`state.running.startedAt`): etcd loaded its CA bundles
    /// from the Secrets as they were then.
    pub started: Option<Timestamp>,
    /// [`api::labels::TEMPLATE_HASH_ANNOTATION`] on the Pod: the template it was built from.
    pub template_hash: Option<String>,
    /// [`api::labels::IMAGE_REPOSITORY_ANNOTATION`] on the Pod: the repository it runs.
    pub image_repository: Option<String>,
}
