//! What a user of the chart sets around the operator itself: the Kubernetes versions it
//! declares, use as a subchart (`global`), the Pods' security contexts (the restricted defaults,
//! and IDs left to the platform), extra arguments and environment, and the controller's
//! PodDisruptionBudget. The apiserver's own verdict on the overridden objects is in
//! `rendered_chart_applies_server_side_on_a_clean_apiserver`.

use k8s_openapi::api::core::v1::EnvVar;
use serde_json::json;

use super::*;

/// The securityContexts both Deployments rendered before they became values: the restricted Pod
/// Security Standard with the image's user, nonroot 65532.
fn restricted_pod_context() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"}
    })
}

fn restricted_container_context() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}
    })
}

/// The Pod's and its one container's securityContext of Deployment `name`, as rendered.
fn contexts(r: &Rendered, name: &str) -> (Value, Value) {
    let spec = &r.find("Deployment", name)["spec"]["template"]["spec"];
    (
        spec["securityContext"].clone(),
        spec["containers"][0]["securityContext"].clone(),
    )
}

/// The values that leave the UID, GID and fsGroup to the platform (OpenShift's restricted SCC
/// assigns them from the namespace's range), for the controller and the webhook.
pub(super) const PLATFORM_IDS: &[&str] = &[
    "podSecurityContext.runAsUser=null",
    "podSecurityContext.runAsGroup=null",
    "podSecurityContext.fsGroup=null",
    "securityContext.runAsUser=null",
    "securityContext.runAsGroup=null",
    "webhook.podSecurityContext.runAsUser=null",
    "webhook.podSecurityContext.runAsGroup=null",
    "webhook.podSecurityContext.fsGroup=null",
    "webhook.securityContext.runAsUser=null",
    "webhook.securityContext.runAsGroup=null",
];

#[tokio::test]
async fn security_contexts_default_to_the_restricted_ones_and_ids_can_be_left_to_the_platform() {
    let r = render_values(&["webhook.enabled=true"]).await;
    for name in [FULLNAME, WEBHOOK] {
        assert_eq!(
            contexts(&r, name),
            (restricted_pod_context(), restricted_container_context()),
            "{name}: the defaults are the contexts rendered before they were values"
        );
        assert_restricted(&r.deployment(name));
    }

    let values: Vec<&str> = PLATFORM_IDS
        .iter()
        .copied()
        .chain(["webhook.enabled=true"])
        .collect();
    let r = render_values(&values).await;
    for name in [FULLNAME, WEBHOOK] {
        let (pod, container) = contexts(&r, name);
        let mut want_pod = restricted_pod_context();
        let mut want_container = restricted_container_context();
        for key in ["runAsUser", "runAsGroup", "fsGroup"] {
            want_pod.as_object_mut().expect("an object").remove(key);
            want_container
                .as_object_mut()
                .expect("an object")
                .remove(key);
        }
        assert_eq!(
            pod, want_pod,
            "{name}: the Pod keeps the rest of restricted"
        );
        assert_eq!(container, want_container, "{name}: the container too");
    }

    // One context can be changed without the other Deployment's.
    let r = render_values(&[
        "webhook.enabled=true",
        "securityContext.readOnlyRootFilesystem=false",
    ])
    .await;
    assert_eq!(
        contexts(&r, FULLNAME).1["readOnlyRootFilesystem"],
        json!(false)
    );
    assert_eq!(
        contexts(&r, WEBHOOK).1,
        restricted_container_context(),
        "the webhook's context is its own value"
    );

    assert_refused(
        "--set",
        &[
            ("podSecurityContext.runAsUser=root", "runAsUser"),
            ("securityContext.runAsUsr=1000", "runAsUsr"),
            ("webhook.podSecurityContext.fsGroupp=1", "fsGroupp"),
        ],
    )
    .await;
}

#[tokio::test]
async fn extra_args_and_env_are_appended_to_each_container() {
    let r = render(&[
        "--set",
        "webhook.enabled=true",
        "--set-json",
        r#"extraArgs=["--cluster-domain=cluster.example"]"#,
        "--set-json",
        r#"extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy:3128"},{"name":"NODE","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeName"}}}]"#,
        "--set-json",
        r#"webhook.extraArgs=["--max-body-bytes=8388608"]"#,
        "--set-json",
        r#"webhook.extraEnv=[{"name":"TZ","value":"UTC"}]"#,
    ])
    .await;
    let manager = r.manager();
    let manager_args = args(&manager);
    assert_eq!(
        manager_args.last().map(String::as_str),
        Some("--cluster-domain=cluster.example"),
        "after the chart's own arguments: {manager_args:?}"
    );
    assert_no_flag_twice(&manager_args);
    let env = manager.env.clone().unwrap_or_default();
    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names[names.len() - 2..],
        ["HTTPS_PROXY", "NODE"],
        "{names:?}"
    );
    assert!(names.contains(&"OPERATOR_IMAGE") && names.contains(&"POD_NAMESPACE"));
    assert_eq!(
        env_value(&manager, "HTTPS_PROXY").as_deref(),
        Some("http://proxy:3128")
    );
    let node: &EnvVar = env.iter().find(|e| e.name == "NODE").expect("NODE");
    assert_eq!(
        node.value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("spec.nodeName")
    );

    let hook = r.webhook_container();
    assert_eq!(
        args(&hook).last().map(String::as_str),
        Some("--max-body-bytes=8388608")
    );
    // The webhook's own flag parser takes the chart's arguments with the appended one.
    assert_eq!(r.webhook_config().max_body_bytes, 8_388_608);
    assert_eq!(env_value(&hook, "TZ").as_deref(), Some("UTC"));
    assert!(env_value(&hook, "WEBHOOK_CONTROLLER_USERNAME").is_some());

    // Defaults: nothing appended.
    let r = render_values(&["webhook.enabled=true"]).await;
    assert_eq!(
        args(&r.manager()).last().map(String::as_str),
        Some("--log-format=text")
    );
    assert!(env_value(&r.manager(), "HTTPS_PROXY").is_none());

    assert_refused(
        "--set-json",
        &[
            (r#"extraEnv=[{"value":"x"}]"#, "name"),
            (r#"extraEnv=[{"name":"A","vaule":"x"}]"#, "vaule"),
            (r#"extraArgs=[7]"#, "extraArgs"),
            (r#"webhook.extraArgs="--x""#, "extraArgs"),
        ],
    )
    .await;
}

#[tokio::test]
async fn controller_pod_disruption_budget_keeps_one_replica_only_when_there_are_several() {
    let r = render(&[]).await;
    assert!(
        r.all("PodDisruptionBudget").is_empty(),
        "one replica: a budget of minAvailable 1 would block every drain of its node"
    );

    let r = render_values(&["replicaCount=3"]).await;
    let pdb = r.find("PodDisruptionBudget", FULLNAME);
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(pdb["spec"].get("maxUnavailable").is_none());
    let selector = &pdb["spec"]["selector"]["matchLabels"];
    let controller = r.deployment(FULLNAME);
    assert_eq!(
        selector,
        &serde_json::to_value(
            controller
                .spec
                .as_ref()
                .and_then(|s| s.selector.match_labels.clone())
        )
        .or_panic(),
        "the budget selects what the Deployment selects"
    );
    let template_labels = template_labels(&controller);
    for (k, v) in selector.as_object().expect("matchLabels") {
        assert_eq!(
            template_labels.get(k).map(String::as_str),
            v.as_str(),
            "{k}"
        );
    }
    assert_eq!(
        selector["control-plane"], "controller-manager",
        "never the webhook Pods"
    );

    let r = render_values(&["replicaCount=3", "podDisruptionBudget.enabled=false"]).await;
    assert!(r.all("PodDisruptionBudget").is_empty());

    // The webhook's budget follows its own replicas (two by default).
    let r = render_values(&["webhook.enabled=true", "webhook.replicaCount=1"]).await;
    assert!(r.all("PodDisruptionBudget").is_empty());
    let r = render_values(&["webhook.enabled=true"]).await;
    assert_eq!(
        r.find("PodDisruptionBudget", WEBHOOK)["spec"]["minAvailable"],
        1
    );
    assert!(r.try_find("PodDisruptionBudget", FULLNAME).is_none());
}

#[tokio::test]
async fn chart_declares_kubernetes_1_29_or_newer_and_its_license() {
    let chart = chart_yaml();
    assert_eq!(chart["kubeVersion"], ">=1.29.0-0");
    assert_eq!(
        chart["annotations"]["artifacthub.io/license"],
        workspace_package("license").as_str()
    );
    let links = chart["annotations"]["artifacthub.io/links"]
        .as_str()
        .expect("artifacthub.io/links");
    let repository = workspace_package("repository");
    for line in links.lines().filter_map(|l| l.trim().strip_prefix("url: ")) {
        let path = line
            .strip_prefix(&format!("{repository}/"))
            .and_then(|p| {
                p.strip_prefix("tree/main/")
                    .or_else(|| p.strip_prefix("blob/main/"))
            })
            .unwrap_or_else(|| panic!("{line} is not a page of {repository} on main"));
        assert!(
            repo_root().join(path).exists(),
            "{line}: no {path} in this repository"
        );
    }

    let helm = Helm::new(None).or_panic();
    for (version, renders) in [
        ("1.28.9", false),
        ("1.29.0", true),
        ("1.29.3-eks-ae9a62a", true),
        ("1.37.0", true),
    ] {
        let out = helm
            .template(RELEASE, NAMESPACE, &["--kube-version", version])
            .await;
        assert_eq!(out.is_ok(), renders, "Kubernetes {version}: {out:?}");
    }
}

/// Both binaries refuse a flag given twice (clap's default), so an extra argument can only be
/// one the chart does not pass.
fn assert_no_flag_twice(args: &[String]) {
    let mut seen = BTreeSet::new();
    for a in args {
        let flag = a.split('=').next().unwrap_or(a);
        assert!(seen.insert(flag), "{flag} given twice: {args:?}");
    }
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).or_panic();
    for entry in std::fs::read_dir(from).or_panic() {
        let entry = entry.or_panic();
        let target = to.join(entry.file_name());
        if entry.file_type().or_panic().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).or_panic();
        }
    }
}

#[tokio::test]
async fn chart_renders_as_a_subchart_with_global_values() {
    let dir = tempfile::tempdir().or_panic();
    let parent = dir.path().join("platform");
    copy_tree(&helm::chart_dir(), &parent.join("charts/etcd-operator"));
    std::fs::write(
        parent.join("Chart.yaml"),
        "apiVersion: v2\nname: platform\nversion: 1.0.0\n",
    )
    .or_panic();
    // Helm hands every subchart the parent's `global` map; a schema without it refuses the
    // subchart's values.
    std::fs::write(
        parent.join("values.yaml"),
        "global:\n  imageRegistry: registry.example.test\netcd-operator:\n  replicaCount: 2\n",
    )
    .or_panic();
    let helm = Helm::new(None).or_panic();
    let text = helm
        .run([
            "template",
            RELEASE,
            &parent.to_string_lossy(),
            "--namespace",
            NAMESPACE,
        ])
        .await
        .or_panic();
    let r = Rendered {
        docs: parse_documents(&text),
    };
    assert_eq!(
        r.deployment(FULLNAME).spec.and_then(|s| s.replicas),
        Some(2),
        "the parent's values reach the subchart"
    );
    r.find("PodDisruptionBudget", FULLNAME);

    // The root keeps refusing unknown keys.
    let err = render_error(&["--set", "globals.x=1"]).await;
    assert!(err.contains("globals"), "{err}");
}
