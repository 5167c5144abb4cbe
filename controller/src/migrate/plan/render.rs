//! The plan as the dry run prints it (and `--apply` before acting). Pure: text from a `Plan` and
//! its `Facts`; it decides nothing (that is `build`'s).

use std::fmt::Write as _;

use api::labels;

use super::{Facts, Plan, AENIX_GROUP, AENIX_VERSION, LEGACY_DATA_DIR_SUBPATH};

/// The plan as the dry run prints it (and `--apply` before acting).
pub fn render(plan: &Plan, f: &Facts) -> String {
    let (name, ns) = (&f.name, &f.namespace);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Adoption of aenix EtcdCluster {ns}/{name} ({AENIX_GROUP}/{AENIX_VERSION})"
    );
    let _ = writeln!(out, "\nChecks:");
    for c in &plan.checks {
        let _ = writeln!(out, "  [{}] {}", if c.ok { "ok" } else { "FAIL" }, c.what);
    }
    let Some(cluster) = &plan.cluster else {
        let _ = writeln!(
            out,
            "\nNothing is changed: fix the failed checks and run again."
        );
        return out;
    };
    let spec = serde_json::to_string(&cluster.spec).unwrap_or_default();
    let _ = writeln!(
        out,
        "\nPlan (no Pod restarts, no data moves, no etcd membership change):"
    );
    let _ = writeln!(
        out,
        "  create EtcdCluster {ns}/{name} (etcd-operator.cozystack.io/v1alpha2) spec {spec}"
    );
    if labels::peer_auto_tls(kube::ResourceExt::annotations(cluster)) {
        let _ = writeln!(
            out,
            "    annotation {}=true: members keep etcd's --peer-auto-tls (https peer URLs), and \
             so do members created later",
            labels::PEER_AUTO_TLS_ANNOTATION
        );
    }
    if let Some(s) = &plan.status {
        let _ = writeln!(
            out,
            "    status: clusterID {}, clusterToken {}, observed = spec (adopted, running)",
            s.cluster_id.as_deref().unwrap_or_default(),
            s.cluster_token.as_deref().unwrap_or_default()
        );
    }
    for a in &plan.members {
        let m = &a.member.metadata;
        let _ = writeln!(
            out,
            "  create EtcdMember {}: member ID {}, annotations {}={}, {}={}",
            m.name.as_deref().unwrap_or_default(),
            a.status.member_id.as_deref().unwrap_or_default(),
            labels::HEADLESS_SERVICE_ANNOTATION,
            plan.legacy_headless_service,
            labels::DATA_DIR_SUBPATH_ANNOTATION,
            LEGACY_DATA_DIR_SUBPATH
        );
    }
    if let Some(sts) = &plan.statefulset {
        let _ = writeln!(
            out,
            "  delete StatefulSet {ns}/{sts} with propagationPolicy=Orphan (its Pods and PVCs stay)"
        );
    }
    for a in &plan.members {
        let pod = a.member.metadata.name.as_deref().unwrap_or_default();
        let _ = writeln!(
            out,
            "  Pod {pod} (uid {}) and PVC {}: owner set to EtcdMember {pod}; labels {} added (the container reads none of them)",
            a.pod_uid,
            a.pvc,
            labels::member_labels(name, pod)
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(
        out,
        "  Service {ns}/{}: the aenix ClusterIP client Service is replaced by our headless Service \
         of the same name; clients should use {ns}/{} (ClusterIP) from now on",
        plan.legacy_client_service,
        labels::client_service_name(name)
    );
    let _ = writeln!(
        out,
        "  Service {ns}/{}: kept (the adopted members' peer URLs use it), owned by the adopted \
         EtcdMembers so it is garbage-collected with the last of them",
        plan.legacy_headless_service
    );
    let _ = writeln!(
        out,
        "  delete the aenix EtcdCluster {ns}/{name} ({AENIX_GROUP}) once everything above is done; \
         its remaining objects (ConfigMap {name}-cluster-state, PodDisruptionBudget) go with it"
    );
    out
}
