//! What the cluster planner sees of each member: its EtcdMember, its Pod and where its data
//! lives. Plain facts gathered by the reconciler (`reconcile`, `data_home`), read by the planner
//! (`plan`) and by the rules beside it (`ca_set`), so none of those depend on each other for them.
//! The Pod's part, [`PodView`], is `pods.rs`'s (what a member Pod says, read by both controllers).

use k8s_openapi::jiff::Timestamp;

use crate::pods::PodView;

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
    /// How many learners this member's etcd accepts at once (`--max-learners`): read off the
    /// etcd container's command line of its Pod (etcd's default of one for a Pod built without
    /// the flag: before the operator set it, or by the reference operator), or, for a member
    /// with no Pod yet, what a Pod built now for its version runs with.
    pub max_learners: u32,
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
