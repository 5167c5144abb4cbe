//! `kubectl etcd status <cluster>`: reads the cluster, its members, snapshots, recoveries and
//! defrags, and prints them ([`render`]).

mod render;

use api::v1alpha2::{EtcdCluster, EtcdDefrag, EtcdRecovery, EtcdSnapshot};

use crate::error::Result;
use crate::members::of_cluster;
use crate::objects::Objects;

pub use render::{activity, newest_verified, render, StatusView};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The EtcdCluster.
    pub cluster: String,
}

pub async fn run(o: &Objects, args: &Args) -> Result<()> {
    // status.members and status.leader from the object as stored: read whether or not this
    // build's types know them.
    let (cluster, raw): (EtcdCluster, _) = o.get_with_json(&args.cluster).await?;
    let (reported, from_status) = of_cluster(o, &args.cluster, &raw).await?;
    let snapshots: Vec<EtcdSnapshot> = o.list(None).await?;
    let recoveries: Vec<EtcdRecovery> = o.list(None).await?;
    let defrags: Vec<EtcdDefrag> = o.list(None).await?;
    let activity = activity(&args.cluster, &recoveries, &defrags, &snapshots);
    let view = StatusView {
        cluster: &cluster,
        members: &reported.members,
        reported: from_status,
        leader: reported.leader.as_deref(),
        newest_verified: newest_verified(&cluster, &snapshots),
        activity: &activity,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    print!("{}", render(&view));
    Ok(())
}
