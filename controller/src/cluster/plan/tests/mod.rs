//! The planner's tests: tiny fixtures here, one behaviour per test in the topic files below.

use super::*;
use api::v1alpha2::{EtcdClusterSpec, EtcdClusterStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn cluster(replicas: i32, status: Option<EtcdClusterStatus>) -> EtcdCluster {
    let mut c = EtcdCluster::new(
        "c",
        EtcdClusterSpec {
            replicas,
            version: "3.6.11".into(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("n".into());
    c.metadata.uid = Some("uid".into());
    c.status = status;
    c
}

fn locked(
    replicas: i32,
    cluster_id: Option<u64>,
    deadline: Option<i64>,
) -> Option<EtcdClusterStatus> {
    Some(EtcdClusterStatus {
        observed: Some(ObservedSpec {
            replicas,
            ..ObservedSpec::of(&cluster(replicas, None).spec, None)
        }),
        cluster_id: cluster_id.map(|id| format!("{id:016x}")),
        progress_deadline: deadline.map(|d| Time(ts(d))),
        ..Default::default()
    })
}

/// The template hash of a member built from [`cluster`]'s spec.
fn template() -> String {
    crate::template::target_hash(&ObservedSpec::of(&cluster(1, None).spec, None))
}

/// A voter created at `ts(created)` whose Pod is Ready on the current template (also the
/// fixture of `cluster::auto_recovery`'s tests).
pub(crate) fn m(name: &str, created: i64) -> MemberView {
    MemberView {
        name: name.into(),
        created: ts(created),
        deleting: false,
        bootstrap: false,
        dormant: false,
        pending: false,
        memory: false,
        voter: true,
        version: "3.6.11".into(),
        recorded_pod_uid: Some(format!("pod-{name}")),
        service: None,
        pod: Some(PodView {
            uid: format!("pod-{name}"),
            ready: true,
            template_hash: Some(template()),
            ..Default::default()
        }),
        data_lost: false,
        trust_bundle: None,
        trusted_cas: None,
        template_hash: template(),
        data_home: DataHome::Unknown,
        image_repository: None,
        max_learners: 1,
    }
}

/// A Pod waiting in CrashLoopBackOff, last crashed a minute before `ts(100)`.
fn crash_looping_pod(name: &str) -> PodView {
    PodView {
        uid: format!("pod-{name}"),
        created: Some(ts(0)),
        ready: false,
        restart_count: 6,
        oom_killed: false,
        crash_loop_backoff: true,
        terminating: false,
        unschedulable: None,
        last_exit: Some(ts(40)),
        trust_bundle: None,
        trusted_cas: None,
        started: None,
        template_hash: None,
        image_repository: None,
    }
}

fn url(name: &str) -> String {
    format!("http://{name}.c.n.svc:2380")
}

fn e(id: u64, name: &str, learner: bool) -> EtcdMemberInfo {
    EtcdMemberInfo {
        id,
        name: name.into(),
        peer_urls: vec![url(name)],
        is_learner: learner,
    }
}

fn etcd(members: Vec<EtcdMemberInfo>) -> EtcdView {
    EtcdView::Members {
        cluster_id: 0xabc,
        members,
    }
}

fn run(c: &EtcdCluster, members: Vec<MemberView>, etcd: EtcdView) -> Plan {
    run_with(c, members, etcd, None)
}

/// [`run`] with `--replace-broken-members-after` at `after` seconds.
fn run_with(c: &EtcdCluster, members: Vec<MemberView>, etcd: EtcdView, after: Option<i64>) -> Plan {
    plan(&Observed {
        replace_broken_after: after.map(SignedDuration::from_secs),
        ..observed(c, members, etcd)
    })
}

/// What [`run`] plans from: `members` and `etcd` at `ts(100)`, nothing else in the way.
fn observed(c: &EtcdCluster, members: Vec<MemberView>, etcd: EtcdView) -> Observed<'_> {
    Observed {
        cluster: c,
        replace_broken_after: None,
        members,
        etcd,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: None,
        image_repository: None,
        restoring: None,
        restore_failure: None,
        kept_claims: Default::default(),
        ca_trust: None,
    }
}

fn peer_cert_manager() -> api::v1alpha2::TlsSpec {
    api::v1alpha2::TlsSpec {
        peer: Some(api::v1alpha2::PeerTlsSpec {
            secret_ref: None,
            cert_manager: Some(api::v1alpha2::PeerCertManagerSpec {
                issuer_ref: api::v1alpha2::IssuerReference::new("ca", Default::default()),
            }),
        }),
        ..Default::default()
    }
}

fn three_voters() -> EtcdView {
    etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ])
}

fn unready(mut v: MemberView) -> MemberView {
    v.pod.as_mut().unwrap().ready = false;
    v
}

fn resources(memory: &str) -> k8s_openapi::api::core::v1::ResourceRequirements {
    k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some(
            [(
                "memory".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

/// [`plan`] of `members` with the Secrets holding trust bundle `want` and `leader` leading.
fn plan_trust(
    c: &EtcdCluster,
    members: Vec<MemberView>,
    etcd: EtcdView,
    want: &str,
    leader: u64,
) -> Plan {
    plan(&Observed {
        cluster: c,
        replace_broken_after: None,
        members,
        etcd,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: Some(want.into()),
        leader: Some(leader),
        image_repository: None,
        restoring: None,
        restore_failure: None,
        kept_claims: Default::default(),
        ca_trust: None,
    })
}

/// An unschedulable Pod since `since`, its Node gone with its local volume.
fn unschedulable(name: &str, since: i64) -> MemberView {
    let mut v = unschedulable_at(
        name,
        since,
        "0/3 nodes are available: 1 node(s) had volume node affinity conflict",
    );
    v.data_home = DataHome::NodeGone {
        node: format!("node-{name}"),
    };
    v
}

/// A member whose Pod has been unschedulable since `since` with the scheduler's `message`, its
/// data's home not looked up.
fn unschedulable_at(name: &str, since: i64, message: &str) -> MemberView {
    let mut v = m(name, 2);
    v.pod = Some(PodView {
        uid: format!("pod-{name}-2"),
        ready: false,
        unschedulable: Some((ts(since), message.into())),
        ..Default::default()
    });
    v
}

fn run_replacing(c: &EtcdCluster, members: Vec<MemberView>, after: Option<i64>) -> Plan {
    let three = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    run_with(c, members, three, after)
}

/// The scheduler's message for a Pod that asks for more cpu than any Node has.
const NO_CPU: &str = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are \
    available: 3 No preemption victims found for incoming pod.";

/// What a rollout is for: a spec edit (new template), a new CA bundle, a new image repository.
#[derive(Clone, Copy, Debug)]
enum RolloutCause {
    Template,
    TrustBundle,
    ImageRepository,
}

mod bootstrap;
mod ca;
mod formed;
mod holds;
mod learners;
mod locking;
mod replace;
mod rollout;
