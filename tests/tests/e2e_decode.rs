//! One stored object the operator cannot decode must not stop it. kube-runtime's typed watch
//! decodes a whole list at once, so before the operator watched leniently a single EtcdCluster
//! with `progressDeadlineSeconds: 2147483648` (or EtcdMember with an out-of-range integer) meant
//! no cluster in any namespace was reconciled again. (`replicas` itself cannot be stored out of
//! int32 range: the apiserver checks the scale subresource's `specReplicasPath` as an int32 even
//! without `format`/`maximum`, "should be less than or equal to 2147483647"; every other integer
//! field had no such check.) Here such objects sit next to a good cluster, the real
//! operator binary starts, and the good cluster must reach Ready while each bad object gets a
//! Warning Event `InvalidSpec` naming the field, and a log line.
//!
//! How the bad objects get stored, honestly: today's CRDs bound every integer (`maximum`), so the
//! apiserver refuses them. They exist in real clusters because they were written under an older
//! CRD without the bound, on a Kubernetes that does not enforce `format: int32` (before 1.36;
//! the API-layer suite runs the corpus on 1.29), and the apiserver never re-validates stored
//! objects when a CRD changes. The test replays exactly that: it installs the CRDs without the
//! bound and format of the two fields, writes the objects, then installs the real CRDs (and
//! checks they now refuse such a write) before the operator starts.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{json, Value};
use tests::corpus;
use tests::e2e::{self, spec, Env};
use tests::env::ControlPlane;
use tests::harness::{eventually, eventually_every};
use tests::podrunner::PodRunner;
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
const REPORTED: Duration = Duration::from_secs(60);
const TOO_BIG: u64 = 2_147_483_648;

/// The property at `path` (names; `[]` steps into an array's items) of `schema`.
fn property<'a>(schema: &'a mut JSONSchemaProps, path: &[&str]) -> &'a mut JSONSchemaProps {
    let Some((first, rest)) = path.split_first() else {
        return schema;
    };
    let next = if *first == "[]" {
        match schema.items.as_mut() {
            Some(JSONSchemaPropsOrArray::Schema(item)) => item.as_mut(),
            other => panic!("no single items schema: {other:?}"),
        }
    } else {
        schema
            .properties
            .as_mut()
            .and_then(|p| p.get_mut(*first))
            .unwrap_or_else(|| panic!("no property {first}"))
    };
    property(next, rest)
}

/// The real CRD of `kind` with the field at `path` unbounded: no minimum, maximum or format, as
/// an older CRD on an older Kubernetes had it.
fn without_bound(kind: &str, path: &[&str]) -> CustomResourceDefinition {
    let mut crd = api::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .expect("a schema");
    let field = property(schema, path);
    assert!(
        field.maximum.is_some(),
        "{kind} {path:?} has no maximum to drop"
    );
    field.maximum = None;
    field.minimum = None;
    field.format = None;
    crd
}

fn object(kind: &str, ns: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": api::v1alpha2::API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .or_panic()
}

fn dynamic_api(cp: &ControlPlane, ns: &str, kind: &str) -> Api<DynamicObject> {
    let resource = corpus::resource(kind).expect("a CRD");
    Api::namespaced_with(cp.client().or_panic(), ns, &resource)
}

/// The first Warning Event with `reason` on the object `name` in `ns`, waited for.
async fn warning_on(cp: &ControlPlane, ns: &str, name: &str, reason: &str) -> Event {
    let events: Api<Event> = Api::namespaced(cp.client().or_panic(), ns);
    eventually(
        &format!("a Warning {reason} Event on {ns}/{name}"),
        REPORTED,
        || async {
            events
                .list(&ListParams::default())
                .await
                .or_panic()
                .items
                .into_iter()
                .find(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some(reason)
                })
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await
}

/// The operator's log without terminal colour codes.
fn plain_log(env: &Env) -> String {
    let raw = std::fs::read_to_string(env.operator.log()).unwrap_or_default();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_cluster_and_member_are_reported_while_a_good_cluster_becomes_ready() {
    let staged = e2e::stage(PodRunner::builder()).await;
    let cp = staged.cp;
    let ns = cp.namespace("decode").await.or_panic();

    // The CRDs as an older release shipped them, and the objects written under them.
    cp.install_crds(vec![
        without_bound("EtcdCluster", &["spec", "progressDeadlineSeconds"]),
        without_bound(
            "EtcdMember",
            &["spec", "topologySpreadConstraints", "[]", "maxSkew"],
        ),
    ])
    .await
    .or_panic();
    let pp = PostParams::default();
    // A CRD's new schema takes effect shortly after it is Established: retry the write until
    // the apiserver serves the loosened schema.
    let bad = object(
        "EtcdCluster",
        &ns,
        "bad",
        json!({"version": "3.6.16", "progressDeadlineSeconds": TOO_BIG}),
    );
    eventually_every(
        &format!("the loosened CRD to admit progressDeadlineSeconds {TOO_BIG}"),
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            match dynamic_api(cp, &ns, "EtcdCluster").create(&pp, &bad).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 422 => Err(status.message),
                Err(e) => panic!("creating the bad EtcdCluster: {e}"),
            }
        },
    )
    .await;
    let spread = json!([{"maxSkew": TOO_BIG, "topologyKey": "topology.kubernetes.io/zone",
                         "whenUnsatisfiable": "DoNotSchedule"}]);
    dynamic_api(cp, &ns, "EtcdMember")
        .create(
            &pp,
            &object(
                "EtcdMember",
                &ns,
                "bad-member",
                json!({"clusterName": "nowhere", "version": "3.6.16",
                       "topologySpreadConstraints": spread}),
            ),
        )
        .await
        .or_panic();

    // Today's CRDs: such a write is refused now, and the stored objects stay as they are.
    cp.install_crds(api::crd::all()).await.or_panic();
    let status = eventually_every(
        &format!("the bounded CRD to refuse progressDeadlineSeconds {TOO_BIG}"),
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let dry = PostParams {
                dry_run: true,
                ..Default::default()
            };
            let again = object(
                "EtcdCluster",
                &ns,
                "bad-again",
                json!({"version": "3.6.16", "progressDeadlineSeconds": TOO_BIG}),
            );
            match dynamic_api(cp, &ns, "EtcdCluster")
                .create(&dry, &again)
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 422 => Ok(status),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        status.message.contains("spec.progressDeadlineSeconds"),
        "{}",
        status.message
    );
    let stored = dynamic_api(cp, &ns, "EtcdCluster")
        .get("bad")
        .await
        .or_panic();
    assert_eq!(
        stored.data["spec"]["progressDeadlineSeconds"],
        json!(TOO_BIG)
    );

    // The operator starts now, after the bad objects.
    let env = staged.operator(None, &[]).await;
    env.create_cluster(&ns, "good", spec(1)).await;
    env.wait_healthy(&ns, "good", 1, BOOT).await;

    let event = warning_on(cp, &ns, "bad", "InvalidSpec").await;
    let note = event.note.unwrap_or_default();
    for part in [
        "spec.progressDeadlineSeconds",
        &TOO_BIG.to_string(),
        "not reconciled",
    ] {
        assert!(note.contains(part), "{part} missing from the Event: {note}");
    }
    let event = warning_on(cp, &ns, "bad-member", "InvalidSpec").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("spec.topologySpreadConstraints[0].maxSkew") && note.contains("EtcdMember"),
        "{note}"
    );
    let log = plain_log(&env);
    for name in ["bad", "bad-member"] {
        assert!(
            log.lines().any(|l| l.contains("cannot decode the object")
                && l.contains(&format!("name=\"{name}\""))
                && l.contains(&format!("namespace=\"{ns}\""))),
            "no decode error logged for {ns}/{name} in {}",
            env.operator.log().display()
        );
    }
}
