//! A survivor recovery's view of the members whose etcd does not run: whether each still has
//! its data PVC, and its position Job (`agent_job::position`) — created when the planner asks
//! ([`start`]), read back as the member's on-disk raft position ([`observe`]).

use api::labels;
use api::v1alpha2::{EtcdMember, EtcdRecovery};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

use super::plan::{needs_disk_read, MemberFacts};
use crate::agent_job::job_view;
use crate::agent_job::position::{position_job, position_job_name, position_read, PositionRead};
use crate::context::Context;
use crate::Error;

const NO_IMAGE: &str = "the operator runs without --operator-image (OPERATOR_IMAGE), so it has \
                        no image for the position Job that reads a stopped member's data dir; \
                        set it (the Helm chart does) and restart the operator";

/// Fill in `facts.claim` and, for a member whose position must be read from its data dir, what
/// its position Job says (left `None` while there is no Job).
pub(super) async fn observe(
    ctx: &Context,
    ns: &str,
    recovery: &EtcdRecovery,
    member: &EtcdMember,
    facts: &mut MemberFacts,
) -> Result<(), Error> {
    let name = member.name_any();
    let claim = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
        .get_opt(&labels::pvc_name(&name))
        .await?;
    facts.claim = claim.is_some_and(|c| c.metadata.deletion_timestamp.is_none());
    if !facts.claim {
        if facts.pod.is_none() {
            facts.note = Some("no Pod, and no data PVC".into());
        }
        return Ok(());
    }
    if !needs_disk_read(facts) {
        return Ok(());
    }
    if ctx.config.operator_image.is_none() {
        facts.on_disk = Some(PositionRead::Failed(NO_IMAGE.into()));
        return Ok(());
    }
    let uid = recovery.uid().unwrap_or_default();
    let job_name = position_job_name(&name, &uid);
    let Some(job) = Api::<Job>::namespaced(ctx.client.clone(), ns)
        .get_opt(&job_name)
        .await?
    else {
        return Ok(());
    };
    if crate::controller_uid(&job).as_deref() != Some(uid.as_str()) {
        facts.on_disk = Some(PositionRead::Failed(format!(
            "Job {ns}/{job_name} exists but is not this EtcdRecovery's; delete it so the \
             recovery can read the member's data dir"
        )));
        return Ok(());
    }
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await?
        .items;
    facts.on_disk = Some(position_read(&job_view(&job, &pods)));
    Ok(())
}

/// Create the position Jobs of `names` (each on the node of the member's Pod, if it has one);
/// the names of the Jobs.
pub(super) async fn start(
    ctx: &Context,
    ns: &str,
    recovery: &EtcdRecovery,
    names: &[String],
) -> Result<Vec<String>, Error> {
    // Without an image `observe` reports every such read as failed: nothing to start.
    let Some(image) = ctx.config.operator_image.as_deref() else {
        return Ok(Vec::new());
    };
    let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let mut created = Vec::new();
    for name in names {
        let Some(member) = members.get_opt(name).await? else {
            continue;
        };
        let node = pods
            .get_opt(name)
            .await?
            .and_then(|p| p.spec.and_then(|s| s.node_name));
        let job = position_job(recovery, &member, node.as_deref(), image);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            // Created by an earlier try: it is read back on the next look.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        created.push(job.name_any());
    }
    Ok(created)
}
