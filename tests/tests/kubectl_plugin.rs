//! `kubectl etcd` (the `kubectl-etcd` binary, run as a user runs it: the admin kubeconfig, `-n`,
//! stdin not a terminal) against the real apiserver, the pod runner's etcd members and the
//! operator: `status` prints every member and the conditions, `snapshot --wait` follows an
//! EtcdSnapshot to Verified, `defrag --all` to Complete, `etcdctl` runs etcdctl in a member Pod
//! (with etcdctl's exit status), `recover --from-survivor --yes` rebuilds a cluster that lost two
//! of its three members with every key; and the refusals: an unknown cluster or snapshot, a
//! snapshot that is not Verified, a healthy cluster, no terminal to confirm on, no permission.
//!
//! Each command's output is echoed to stderr (`--nocapture` shows it): docs/kubectl-plugin.md
//! quotes it.

use std::time::Duration;

use api::conditions::reason;
use api::v1alpha2::{EtcdRecovery, EtcdSnapshot, RecoveryPhase};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::Api;

use tests::backup::create_backups_claim;
use tests::e2e::{env, spec, Env};
use tests::harness::eventually;
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// Two lost members are noticed after the survivor's readiness probe fails, then a reconcile.
const NOTICE: Duration = Duration::from_secs(90);
/// The plugin's own --timeout for a recovery (it fails the test if it runs out).
const RECOVER: &str = "5m";

/// What one run of the plugin said.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> &str {
        assert_eq!(
            self.code, 0,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        &self.stdout
    }

    /// A refusal: exit status 1 and the error on stderr.
    fn refused(&self) -> &str {
        assert_eq!(
            self.code, 1,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        &self.stderr
    }
}

/// `kubectl etcd <args> -n <ns>` with the admin kubeconfig, stdin from /dev/null (the flags go
/// before a `--`, after which everything is etcdctl's).
async fn plugin(env: &Env, ns: &str, args: &[&str]) -> Run {
    let binary = tests::operator::bin_dir().join("kubectl-etcd");
    tests::harness::warn_if_stale(
        &binary,
        &["plugin/src", "plugin/Cargo.toml", "api/src"],
        "make build",
    );
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let (own, etcdctl) = args.split_at(split);
    let out = tokio::process::Command::new(&binary)
        .args(own)
        .arg("-n")
        .arg(ns)
        .arg("--kubeconfig")
        .arg(env.cp.kubeconfig())
        .args(etcdctl)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", binary.display()));
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!(
        "$ kubectl etcd {} -n {ns} {}\n{}{}[exit {}]\n",
        own.join(" "),
        etcdctl.join(" "),
        run.stdout,
        run.stderr,
        run.code
    );
    run
}

/// The name in "<kind> <name> created".
fn created(out: &str, kind: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{kind} ")))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no {kind} created in:\n{out}"))
}

/// The cluster's `status` as stored (with fields this build's types may not know).
async fn raw_status(env: &Env, ns: &str, name: &str) -> serde_json::Value {
    let resource = ApiResource::erase::<api::v1alpha2::EtcdCluster>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(env.client(), ns, &resource);
    let c = api.get(name).await.or_panic();
    c.data.get("status").cloned().unwrap_or_default()
}

async fn recoveries(env: &Env, ns: &str) -> Vec<EtcdRecovery> {
    Api::<EtcdRecovery>::namespaced(env.client(), ns)
        .list(&ListParams::default())
        .await
        .or_panic()
        .items
}

/// `status` names every member and the leader the operator reports (`status.leader`, one of
/// the `status.members`), that member's row saying `Leader`.
async fn assert_status(env: &Env, ns: &str, name: &str, ready: usize) -> String {
    let members = env.member_names(ns, name).await;
    assert_eq!(members.len(), 3, "{members:?}");
    let leader = eventually(
        "the operator to report the cluster's leader (status.leader)",
        Duration::from_secs(60),
        || async {
            let status = raw_status(env, ns, name).await;
            match status.get("leader").and_then(|l| l.as_str()) {
                Some(leader) if status["members"].as_array().map(Vec::len) == Some(3) => {
                    Ok(leader.to_string())
                }
                _ => Err(format!("status {status}")),
            }
        },
    )
    .await;
    assert!(members.contains(&leader), "{leader} {members:?}");
    let out = plugin(env, ns, &["status", name]).await.ok().to_string();
    assert!(
        out.starts_with(&format!(
            "EtcdCluster {ns}/{name}: etcd {}, {ready} of 3 members ready",
            spec(3).version
        )),
        "{out}"
    );
    for m in &members {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{m} "))),
            "no row for {m}:\n{out}"
        );
    }
    assert!(
        out.contains(&format!("\nLeader: {leader}\n")),
        "status.leader {leader} not printed:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("{leader} ")) && l.contains(" Leader ")),
        "{out}"
    );
    assert!(out.contains("\nCONDITION "), "{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_snapshot_defrag_and_etcdctl_on_a_healthy_cluster_and_the_refusals() {
    let env = env().await;
    let ns = env.namespace("plugin").await;
    let name = "demo";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 50).await;

    let out = assert_status(env, &ns, name, 3).await;
    assert!(out.contains("Available     True "), "{out}");
    assert!(out.contains(reason::QUORUM_HEALTHY), "{out}");
    assert!(
        out.contains("Newest verified snapshot: none of this cluster"),
        "{out}"
    );
    assert!(
        out.contains("  idle: Progressing=False Reconciled"),
        "{out}"
    );

    // snapshot --wait follows it to Verified.
    create_backups_claim(env, &ns).await;
    let run = plugin(
        env,
        &ns,
        &["snapshot", name, "--to", "pvc://backups/etcd", "--wait"],
    )
    .await;
    let out = run.ok();
    let verified = created(out, "EtcdSnapshot");
    assert!(
        out.contains(&format!(
            "EtcdSnapshot {verified}: Verified (SnapshotVerified: "
        )),
        "{out}"
    );
    let snapshots: Api<EtcdSnapshot> = Api::namespaced(env.client(), &ns);
    let s = snapshots.get(&verified).await.or_panic();
    assert_eq!(
        s.status.as_ref().and_then(|st| st.verified()),
        Some(true),
        "{s:?}"
    );
    let out = plugin(env, &ns, &["status", name]).await.ok().to_string();
    assert!(
        out.contains(&format!(
            "Newest verified snapshot: {verified} (Verified, SnapshotVerified), completed "
        )),
        "{out}"
    );
    // Without --to: the destination of the cluster's newest snapshot; not verified.
    let out = plugin(env, &ns, &["snapshot", name, "--no-verify", "--wait"]).await;
    let unverified = created(out.ok(), "EtcdSnapshot");
    assert!(
        out.stdout
            .contains("destination from the newest EtcdSnapshot"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "EtcdSnapshot {unverified}: Complete (not verified"
        )),
        "{}",
        out.stdout
    );

    // The refusals, each naming what is wrong; none creates an EtcdRecovery.
    let e = plugin(
        env,
        &ns,
        &["recover", name, "--from-snapshot", &unverified, "--yes"],
    )
    .await;
    assert!(
        e.refused()
            .contains(&format!("EtcdSnapshot {unverified} is not Verified=True")),
        "{}",
        e.stderr
    );
    let e = plugin(
        env,
        &ns,
        &["recover", name, "--from-snapshot", &verified, "--yes"],
    )
    .await;
    assert!(
        e.refused()
            .contains(&format!("EtcdCluster {name} is Available (QuorumHealthy")),
        "{}",
        e.stderr
    );
    let e = plugin(
        env,
        &ns,
        &["recover", name, "--from-snapshot", "nope", "--yes"],
    )
    .await;
    assert_eq!(
        e.refused().trim(),
        format!(
            "error: EtcdSnapshot nope not found in namespace {ns}: `kubectl get etcdsnapshots -n {ns}` lists them"
        )
    );
    let e = plugin(env, &ns, &["status", "nope"]).await;
    assert_eq!(
        e.refused().trim(),
        format!(
            "error: EtcdCluster nope not found in namespace {ns}: `kubectl get etcdclusters -n {ns}` lists them"
        )
    );
    let e = plugin(env, &ns, &["status", name, "--as", "nobody"]).await;
    assert!(
        e.refused().starts_with(&format!(
            "error: permission denied: you may not get etcdclusters.etcd-operator.cozystack.io in namespace {ns} (the apiserver answered 403 Forbidden: "
        )),
        "{}",
        e.stderr
    );
    let e = plugin(env, &ns, &["recover", name]).await;
    assert_eq!(e.code, 2, "{}", e.stderr);
    assert!(e.stderr.contains("--from-survivor"), "{}", e.stderr);
    assert!(recoveries(env, &ns).await.is_empty());

    // etcdctl in a member Pod: its output, its exit status.
    let out = plugin(env, &ns, &["etcdctl", name, "--", "member", "list"]).await;
    assert_eq!(
        out.ok()
            .lines()
            .filter(|l| l.contains(", started, "))
            .count(),
        3,
        "{}",
        out.stdout
    );
    plugin(env, &ns, &["etcdctl", name, "--", "put", "plugin", "yes"])
        .await
        .ok();
    let out = plugin(env, &ns, &["etcdctl", name, "--", "get", "plugin"]).await;
    assert_eq!(out.ok(), "plugin\nyes\n");
    // etcdctl's own exit status (ExitBadArgs, 128) comes through.
    let bad = plugin(env, &ns, &["etcdctl", name, "--", "get"]).await;
    assert_eq!(bad.code, 128, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("get command needs one argument"),
        "{}",
        bad.stderr
    );

    // defrag --all: every member defragmented.
    let out = plugin(env, &ns, &["defrag", name, "--all"]).await;
    let defrag = created(out.ok(), "EtcdDefrag");
    assert!(
        out.stdout
            .contains(&format!("EtcdDefrag {defrag}: Complete, 3 defragmented")),
        "{}",
        out.stdout
    );
    env.check_keys(&ns, name, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_from_survivor_rebuilds_a_cluster_that_lost_two_of_three_members() {
    let env = env().await;
    let ns = env.namespace("plugin-recover").await;
    let name = "lost";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 100).await;
    let mut members = env.member_names(&ns, name).await;
    members.sort();
    tests::recovery::lose_members(&env.client(), &ns, &members[1..]).await;
    env.wait_unavailable(&ns, name, reason::QUORUM_LOST, "EtcdRecovery", NOTICE)
        .await;

    let out = plugin(env, &ns, &["status", name]).await.ok().to_string();
    assert!(out.contains(reason::QUORUM_LOST), "{out}");

    // No terminal and no --yes: the plan is shown, nothing is created.
    let e = plugin(env, &ns, &["recover", name, "--from-survivor"]).await;
    assert!(
        e.refused().contains("stdin is not a terminal"),
        "{}",
        e.stderr
    );
    assert!(e.stdout.starts_with(&format!(
        "Recovery of EtcdCluster {ns}/{name} from a surviving member\n"
    )));
    assert!(recoveries(env, &ns).await.is_empty());

    let run = plugin(
        env,
        &ns,
        &[
            "recover",
            name,
            "--from-survivor",
            "--yes",
            "--timeout",
            RECOVER,
        ],
    )
    .await;
    let out = run.ok();
    let recovery = created(out, "EtcdRecovery");
    assert!(
        out.contains("The operator's plan (status.plan):\n")
            && out.contains(&format!("  member:    {}\n", members[0])),
        "{out}"
    );
    assert!(
        out.contains(&format!("EtcdRecovery {recovery}: Complete: cluster ID ")),
        "{out}"
    );
    let r = Api::<EtcdRecovery>::namespaced(env.client(), &ns)
        .get(&recovery)
        .await
        .or_panic();
    assert_eq!(
        r.status.as_ref().and_then(|s| s.phase),
        Some(RecoveryPhase::Complete)
    );
    env.wait_healthy(&ns, name, 3, BOOT).await;
    env.check_keys(&ns, name, &keys).await;
    assert_status(env, &ns, name, 3).await;
}
