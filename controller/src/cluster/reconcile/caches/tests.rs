use super::*;
use crate::builders::tests::cluster;
use crate::builders::{pdb, service};
use crate::cluster::children::{pdb_in_shape, service_in_shape};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::{reflector, watcher};
use kube::Resource;

fn at(version: &str) -> OwnWrites {
    OwnWrites::In(version.to_string())
}

#[test]
fn a_cluster_this_process_never_wrote_is_read_from_the_cache() {
    // After a restart: the cache's initial list came after every earlier write.
    assert_eq!(cluster_read(None, Some("7")), Read::Cache);
}

#[test]
fn a_cache_behind_the_operators_own_status_write_is_not_planned_from() {
    // The status write returned version 9; the cache still shows 8 (or something else).
    assert_eq!(cluster_read(Some(&at("9")), Some("8")), Read::Fresh);
    assert_eq!(cluster_read(Some(&at("9")), None), Read::Fresh);
    // Once the watch delivered the write, the cache is the cluster as written.
    assert_eq!(cluster_read(Some(&at("9")), Some("9")), Read::Cache);
    // A write whose result is unknown: fresh, whatever the cache shows.
    assert_eq!(
        cluster_read(Some(&OwnWrites::Unknown), Some("9")),
        Read::Fresh
    );
}

fn member(name: &str, uid: &str, version: &str, owner: &EtcdCluster) -> EtcdMember {
    let mut m = EtcdMember::new(name, Default::default());
    m.metadata.namespace = owner.namespace();
    m.metadata.uid = Some(uid.to_string());
    m.metadata.resource_version = Some(version.to_string());
    m.metadata.labels = Some([(labels::CLUSTER.to_string(), owner.name_any())].into());
    m.metadata.owner_references = owner.controller_owner_ref(&()).map(|o| vec![o]);
    m
}

#[test]
fn members_are_listed_fresh_after_the_operator_wrote_one_until_the_cache_holds_the_list() {
    let c = cluster("c", "ns");
    assert_eq!(members_read(false), Read::Cache);
    assert_eq!(members_read(true), Read::Fresh);
    let a = member("c-a", "ua", "1", &c);
    let b = member("c-b", "ub", "2", &c);
    // The member the previous reconcile created is not in the cache yet.
    assert!(!cache_holds(
        &[a.clone(), b.clone()],
        std::slice::from_ref(&a)
    ));
    // Its status patched since the cache saw it.
    let b_patched = member("c-b", "ub", "3", &c);
    assert!(!cache_holds(
        &[a.clone(), b_patched],
        &[a.clone(), b.clone()]
    ));
    // Deleted and gone from the API, still cached.
    assert!(!cache_holds(
        std::slice::from_ref(&a),
        &[a.clone(), b.clone()]
    ));
    // Same members at the same versions, in any order.
    assert!(cache_holds(&[b.clone(), a.clone()], &[a, b]));
}

#[test]
fn the_cached_members_are_the_ones_a_fresh_list_selects() {
    let c = cluster("c", "ns");
    let previous = {
        let mut p = cluster("c", "ns");
        p.metadata.uid = Some("uid-of-the-previous-incarnation".into());
        p
    };
    let other = cluster("d", "ns");
    let elsewhere = cluster("c", "other-ns");
    let (members, mut writer) = reflector::store::<Lenient<EtcdMember>>();
    for m in [
        member("c-b", "u2", "1", &c),
        member("c-a", "u1", "1", &c),
        member("c-old", "u3", "1", &previous),
        member("d-a", "u4", "1", &other),
        member("c-x", "u5", "1", &elsewhere),
    ] {
        let lenient: Lenient<EtcdMember> =
            serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(lenient));
    }
    let caches = Caches::new(members, reflector::store().0, reflector::store().0);
    let names: Vec<String> = caches
        .members(&c)
        .unwrap()
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert_eq!(names, ["c-a", "c-b"], "this incarnation's, in name order");

    // One of the cluster's members does not decode: the fresh list reports it.
    let broken: Lenient<EtcdMember> = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
        "metadata": {"name": "c-z", "namespace": "ns", "uid": "u9",
                     "labels": {labels::CLUSTER: "c"}},
        "spec": {"clusterName": 7},
    }))
    .unwrap();
    assert!(broken.decoded().is_err());
    writer.apply_watcher_event(&watcher::Event::Apply(broken));
    assert!(caches.members(&c).is_none());
}

#[test]
fn what_a_reconcile_wrote_is_kept_per_incarnation() {
    let caches = Caches::new(
        reflector::store().0,
        reflector::store().0,
        reflector::store().0,
    );
    let c = cluster("c", "ns");
    assert_eq!(caches.own(&c), Own::default());
    let wrote = Own {
        cluster: Some(at("12")),
        members_written: true,
    };
    caches.record(&c, wrote.clone());
    assert_eq!(caches.own(&c), wrote);
    // A cluster recreated under the same name is another incarnation: nothing of it written.
    let mut again = cluster("c", "ns");
    again.metadata.uid = Some("uid-new".into());
    assert_eq!(caches.own(&again), Own::default());
    caches.forget(&c);
    assert_eq!(caches.own(&c), Own::default());
}

#[test]
fn a_cached_service_only_ever_means_nothing_to_do() {
    let c = cluster("c", "ns");
    let owner = c.metadata.uid.as_deref();
    let want = service::client_service(&c).unwrap();
    assert!(service_in_shape(Some(&want), &want, owner));
    // Not cached (not created yet, or someone else's without the operator's labels): fresh.
    assert!(!service_in_shape(None, &want, owner));
    // Someone else's, or the previous incarnation's: fresh (never adopted on a cached copy).
    let mut foreign = want.clone();
    foreign.metadata.owner_references = None;
    assert!(!service_in_shape(Some(&foreign), &want, owner));
    assert!(!service_in_shape(Some(&want), &want, Some("uid-other")));
    // Drifted: fresh, and restored if the fresh read agrees.
    let mut drifted = want.clone();
    if let Some(spec) = drifted.spec.as_mut() {
        spec.selector = Some([("app".to_string(), "elsewhere".to_string())].into());
    }
    assert!(!service_in_shape(Some(&drifted), &want, owner));
}

#[test]
fn a_cached_pdb_only_ever_means_nothing_to_do() {
    let c = cluster("c", "ns");
    let owner = c.metadata.uid.as_deref();
    let want = pdb::voter_pdb(&c, 3, 3).unwrap().unwrap();
    assert!(pdb_in_shape(None, None, owner), "none wanted, none there");
    assert!(pdb_in_shape(Some(&want), Some(&want), owner));
    // To create or to delete: decided on a fresh read.
    assert!(!pdb_in_shape(None, Some(&want), owner));
    assert!(!pdb_in_shape(Some(&want), None, owner));
    // Another budget, or not the cluster's.
    let mut other_budget = want.clone();
    if let Some(spec) = other_budget.spec.as_mut() {
        spec.min_available = Some(IntOrString::Int(1));
    }
    assert!(!pdb_in_shape(Some(&other_budget), Some(&want), owner));
    let mut foreign = want.clone();
    foreign.metadata.owner_references = None;
    assert!(!pdb_in_shape(Some(&foreign), Some(&want), owner));
}

#[tokio::test]
async fn every_reconcile_waiting_for_the_caches_goes_on_once_they_are_filled() {
    let (members, mut member_writer) = reflector::store::<Lenient<EtcdMember>>();
    let (services, mut service_writer) = reflector::store::<Service>();
    let (pdbs, mut pdb_writer) = reflector::store::<PodDisruptionBudget>();
    let caches = Arc::new(Caches::new(members, services, pdbs));
    // After a restart every cluster is due at once: many reconciles wait before the initial
    // lists are in.
    let waiting: Vec<_> = (0..8)
        .map(|_| {
            let caches = Arc::clone(&caches);
            tokio::spawn(async move { caches.ready().await })
        })
        .collect();
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    member_writer.apply_watcher_event(&watcher::Event::InitDone);
    service_writer.apply_watcher_event(&watcher::Event::InitDone);
    pdb_writer.apply_watcher_event(&watcher::Event::InitDone);
    for w in waiting {
        let ready = tokio::time::timeout(std::time::Duration::from_secs(5), w)
            .await
            .expect("a reconcile still waits for caches that are filled")
            .unwrap();
        assert!(ready);
    }
}
