//! The continuous archive (`snapshot-agent archive`) and its replay (`snapshot-agent replay`)
//! run as processes against a real etcd and a real MinIO: the archive holds every revision after
//! its base once, across a SIGKILL of the archiver, and a scratch etcd restored from the base and
//! replayed to a revision in the middle holds exactly the cluster's state at that revision
//! (etcd's own `HashKV`, and every key); `snapshot-agent point-in-time` does all of it in one
//! command and stores the result as a snapshot that restores to that state.

use std::collections::BTreeMap;
use std::time::Duration;

use controller::agent::archive::record_of;
use controller::archive::{self, Record, RecordedHash, SegmentName, Window};
use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use tests::env::etcd::{Etcd, EtcdConfig};
use tests::env::minio::Minio;
use tests::harness::eventually;
use tests::OrPanic;

use super::{
    current_revision, restore_agent, s3_save, s3_source, sigterm, with_minio, Agent, OrPanicExt,
    Running,
};

const PREFIX: &str = "archives/source/";

#[tokio::test]
async fn the_archive_holds_every_revision_once_across_a_sigkill_and_replays_exactly_to_a_chosen_revision(
) {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let etcd_bin = bins.binary("etcd-3.6", "etcd").or_panic();
    let Sourced {
        source,
        config,
        mut client,
        base,
        ..
    } = source_with_base(&etcd_bin, root, &minio).await;
    let archiver = archiver(root, &config, base, &minio);
    let mut running = archiver.start("archive-1");

    // Phase 1: puts, overwrites, a multi-key transaction, deletes of base keys and a key on a
    // lease granted after the base; then the archive catches up and hashes it.
    let lease = client.lease_grant(600, None).await.or_panic().id();
    write_phase(&mut client, "one", 0..60, lease).await;
    let phase_one = current_revision(&mut client).await;
    wait_for_hash_at(&minio, phase_one).await;

    // Phase 2: the archiver SIGKILLed while writes go on, and started again.
    write_phase(&mut client, "two", 0..20, 0).await;
    running.child.start_kill().or_panic();
    let killed = running.child.wait().await.or_panic();
    assert!(!killed.success(), "SIGKILL: {killed}");
    write_phase(&mut client, "two", 20..50, 0).await;
    running = archiver.start("archive-2");
    let target = current_revision(&mut client).await;
    wait_for_hash_at(&minio, target).await;
    let at_target = keys_at(&mut client, target).await;

    // Phase 3: after the target: new keys, and a key of the target's overwritten.
    write_phase(&mut client, "three", 0..40, 0).await;
    client
        .put("one/001", "after the target", None)
        .await
        .or_panic();
    let newest = current_revision(&mut client).await;
    wait_for_archive(&minio, newest).await;
    terminate(running).await;

    // Every revision after the base once: the segments make one run from base+1 to the newest,
    // and their records are etcd's own history, event for event.
    let names = segment_names(&minio).await;
    let window = Window::of(&names);
    assert_eq!(
        (window.first, window.last),
        (Some(base + 1), Some(newest)),
        "{names:?}"
    );
    assert!(
        window.gaps.is_empty() && window.overlaps.is_empty(),
        "{window:?}"
    );
    let archived = archived_records(&minio, &names).await;
    assert_eq!(
        archived,
        history(&mut client, base + 1, newest).await,
        "the archive is etcd's history after the base, event for event"
    );

    // The replay into a scratch etcd restored from the base, up to the target.
    let scratch_config = EtcdConfig::new("scratch", "scratch-token").or_panic();
    let scratch_dir = root.join("scratch").join("data");
    restore_agent(
        &bins,
        "etcd-3.6",
        root,
        &scratch_dir,
        &scratch_config,
        &s3_source(&minio, "base.db"),
    )
    .arg("--bump-revision=0")
    .creds(&minio.writer)
    .run("restore-base")
    .await
    .assert_code(0, "restoring the base");
    let scratch = Etcd::start_with(
        &etcd_bin,
        &scratch_config,
        &scratch_dir,
        &root.join("logs"),
        &["--max-txn-ops=100000".into()],
    )
    .await
    .or_panic();
    let replay = |to: i64| {
        Agent::new(
            root,
            &[
                "replay",
                &format!("--endpoints={}", scratch_config.client_url),
                &format!("--to-revision={to}"),
                &format!("--s3-key={PREFIX}"),
            ],
        )
        .s3(&minio, &minio.writer)
    };
    let run = replay(target).run("replay").await;
    run.assert_code(0, "the replay");
    let replayed = &run.result["replayed"];
    assert_eq!(replayed["baseRevision"], base, "{}", run.result);
    assert_eq!(replayed["targetRevision"], target, "{}", run.result);
    assert_eq!(replayed["leasesGranted"], 1, "{}", run.result);
    let proven: Vec<i64> = serde_json::from_value(replayed["provenAt"].clone()).or_panic();
    assert!(
        proven.contains(&phase_one) && proven.contains(&target),
        "the replay compared the hashes recorded at {phase_one} and {target}: {}",
        run.result
    );
    // The proof, checked here too: etcd's HashKV at the target, the cluster's and the scratch's.
    let mut scratch_client = scratch.client().await.or_panic();
    let ours = scratch_client
        .maintenance_client()
        .hash_kv(target)
        .await
        .or_panic();
    let theirs = client.maintenance_client().hash_kv(target).await.or_panic();
    assert_eq!(
        (ours.hash(), ours.compact_version()),
        (theirs.hash(), theirs.compact_version())
    );
    assert_eq!(current_revision(&mut scratch_client).await, target);
    let replayed_keys = keys_at(&mut scratch_client, target).await;
    assert_eq!(
        replayed_keys, at_target,
        "every key as the cluster had it at the target"
    );
    assert!(
        replayed_keys.keys().all(|k| !k.starts_with("three/")),
        "nothing written after the target"
    );
    let leased = scratch_client.get("one/leased", None).await.or_panic();
    assert_eq!(
        leased.kvs().first().map(|kv| kv.lease()),
        Some(lease),
        "a leased key keeps its lease ID"
    );

    // A target past the archive is refused, naming the first revision it lacks.
    let past = replay(newest + 10).run("replay-past").await;
    past.assert_code(2, "a replay past the archive");
    assert!(
        past.result["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("revision {} is not in the archive", newest + 1)),
        "{}",
        past.result
    );
    scratch.stop();
    source.stop();
}

/// `snapshot-agent point-in-time` builds, off to the side, the snapshot of a chosen revision and
/// of the archive's newest: each restores like any snapshot to exactly the cluster's keys at that
/// revision (and etcd's own HashKV agrees), and the cluster itself is never written to.
#[tokio::test]
async fn a_point_in_time_build_stores_a_snapshot_of_exactly_the_chosen_revision_or_the_newest() {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let etcd_bin = bins.binary("etcd-3.6", "etcd").or_panic();
    let etcdutl = bins.binary("etcd-3.6", "etcdutl").or_panic();
    let Sourced {
        source,
        config,
        mut client,
        base,
        base_sha,
    } = source_with_base(&etcd_bin, root, &minio).await;
    let running = archiver(root, &config, base, &minio).start("archive");
    let lease = client.lease_grant(600, None).await.or_panic().id();
    write_phase(&mut client, "one", 0..40, lease).await;
    let middle = current_revision(&mut client).await;
    wait_for_hash_at(&minio, middle).await;
    let at_middle = keys_at(&mut client, middle).await;
    write_phase(&mut client, "two", 0..40, 0).await;
    let newest = current_revision(&mut client).await;
    wait_for_hash_at(&minio, newest).await;
    let at_newest = keys_at(&mut client, newest).await;
    terminate(running).await;
    assert!(
        at_middle.keys().all(|k| !k.starts_with("two/"))
            && at_newest.keys().any(|k| k.starts_with("two/")),
        "the two points differ"
    );

    for (to, name, revision, keys) in [
        (Some(middle), "at-middle", middle, &at_middle),
        (None, "latest", newest, &at_newest),
    ] {
        let mut build = Agent::new(
            root,
            &[
                "point-in-time",
                &format!("--s3-key={PREFIX}"),
                "--base-key=base.db",
                &format!("--base-sha256={base_sha}"),
                "--output-prefix=point-in-time/",
                &format!("--output-name={name}"),
                "--output-uid=uid-recovery",
                &format!("--etcdutl={}", etcdutl.display()),
                &format!("--etcd={}", etcd_bin.display()),
                &format!("--work-dir={}", root.join("work").join(name).display()),
            ],
        )
        .s3(&minio, &minio.writer);
        if let Some(to) = to {
            build = build.arg(format!("--to-revision={to}"));
        }
        let run = build.run(name).await;
        run.assert_code(0, name);
        let built = &run.result["pointInTime"];
        assert_eq!(built["baseRevision"], base, "{}", run.result);
        assert_eq!(built["targetRevision"], revision, "{}", run.result);
        assert_eq!(
            built["provenAtRevision"], revision,
            "the build compared the hash recorded at {revision}: {}",
            run.result
        );
        assert_eq!(
            built["artifact"]["hashKV"]["revision"], revision,
            "{}",
            run.result
        );
        let checksum = built["artifact"]["checksum"]
            .as_str()
            .or_panic_none("the result's checksum")
            .to_string();

        // The result restores like any snapshot, checked against its sha256.
        let restored_config = EtcdConfig::new(name, "restored-token").or_panic();
        let restored_dir = root.join("restored").join(name);
        restore_agent(
            &bins,
            "etcd-3.6",
            root,
            &restored_dir,
            &restored_config,
            &s3_source(&minio, &format!("point-in-time/{name}.db")),
        )
        .arg("--bump-revision=0")
        .arg(format!("--expected-sha256={checksum}"))
        .creds(&minio.writer)
        .run(&format!("restore-{name}"))
        .await
        .assert_code(0, "restoring the point-in-time snapshot");
        let restored = Etcd::start(
            &etcd_bin,
            &restored_config,
            &restored_dir,
            &root.join("logs"),
        )
        .await
        .or_panic();
        let mut restored_client = restored.client().await.or_panic();
        assert_eq!(current_revision(&mut restored_client).await, revision);
        assert_eq!(
            keys_at(&mut restored_client, revision).await,
            *keys,
            "every key as the cluster had it at revision {revision}, nothing written after it"
        );
        let ours = restored_client
            .maintenance_client()
            .hash_kv(revision)
            .await
            .or_panic();
        let theirs = client
            .maintenance_client()
            .hash_kv(revision)
            .await
            .or_panic();
        assert_eq!(
            (ours.hash(), ours.compact_version()),
            (theirs.hash(), theirs.compact_version()),
            "etcd's own HashKV at {revision}"
        );
        restored.stop();
    }
    assert_eq!(
        current_revision(&mut client).await,
        newest,
        "the cluster was never written to"
    );
    source.stop();
}

/// A source etcd with 40 keys `pre/*`, and the window's base: its snapshot `base.db` in MinIO at
/// revision `base`, as a schedule's would be.
struct Sourced {
    source: Etcd,
    config: EtcdConfig,
    client: Client,
    base: i64,
    /// The base's `sha256:<hex>`, as its save reported it.
    base_sha: String,
}

async fn source_with_base(
    etcd_bin: &std::path::Path,
    root: &std::path::Path,
    minio: &Minio,
) -> Sourced {
    let config = EtcdConfig::new("source", "source-token").or_panic();
    let source = Etcd::start(etcd_bin, &config, &root.join("source"), &root.join("logs"))
        .await
        .or_panic();
    let mut client = source.client().await.or_panic();
    for i in 0..40 {
        client
            .put(format!("pre/{i:03}"), format!("v{i}"), None)
            .await
            .or_panic();
    }
    let base = current_revision(&mut client).await;
    let saved = s3_save(root, &source, "base", "uid-base", minio, &minio.writer)
        .run("save-base")
        .await;
    saved.assert_code(0, "the base snapshot");
    let base_sha = saved.result["artifact"]["checksum"]
        .as_str()
        .or_panic_none("the base's checksum")
        .to_string();
    Sourced {
        source,
        config,
        client,
        base,
        base_sha,
    }
}

/// The archiver of the source `config` from right after `base`, to [`PREFIX`] in MinIO.
fn archiver(root: &std::path::Path, config: &EtcdConfig, base: i64, minio: &Minio) -> Agent {
    Agent::new(
        root,
        &[
            "archive",
            &format!("--endpoints={}", config.client_url),
            &format!("--from-revision={}", base + 1),
            "--flush-interval=300ms",
            "--hash-interval=500ms",
            &format!("--s3-key={PREFIX}"),
        ],
    )
    .s3(minio, &minio.writer)
}

/// Writes of one phase, each its own revision except the transactions: a put of a new key, an
/// overwrite, every fifth a two-key transaction, every seventh a delete of a base key, and (with
/// a lease) one key on it.
async fn write_phase(client: &mut Client, phase: &str, ops: std::ops::Range<usize>, lease: i64) {
    for i in ops {
        client
            .put(format!("{phase}/{i:03}"), format!("{phase}-{i}"), None)
            .await
            .or_panic();
        if i % 5 == 0 {
            let txn = Txn::new().and_then([
                TxnOp::put(format!("{phase}/txn-a-{i}"), "a", None),
                TxnOp::put(
                    format!("{phase}/{i:03}"),
                    format!("{phase}-{i}-again"),
                    None,
                ),
            ]);
            client.txn(txn).await.or_panic();
        }
        if i % 7 == 0 {
            client
                .delete(format!("pre/{:03}", i % 40), None)
                .await
                .or_panic();
        }
    }
    if lease != 0 {
        client
            .put(
                format!("{phase}/leased"),
                "on a lease",
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .or_panic();
    }
}

async fn segment_names(minio: &Minio) -> Vec<SegmentName> {
    minio
        .objects()
        .await
        .iter()
        .filter_map(|(key, _)| SegmentName::parse(PREFIX, key))
        .collect()
}

/// Wait until the archive holds revision `revision`.
async fn wait_for_archive(minio: &Minio, revision: i64) {
    eventually(
        &format!("the archive to reach revision {revision}"),
        Duration::from_secs(60),
        || async {
            let last = Window::of(&segment_names(minio).await).last;
            if last == Some(revision) {
                Ok(())
            } else {
                Err(format!("archived up to {last:?}"))
            }
        },
    )
    .await;
}

/// Wait until the archiver recorded the cluster's hash at `revision` (it did once the archive
/// held it and the cluster stood still).
async fn wait_for_hash_at(minio: &Minio, revision: i64) {
    let key = RecordedHash::key(PREFIX, revision);
    eventually(
        &format!("a hash recorded at revision {revision}"),
        Duration::from_secs(60),
        || async {
            let objects = minio.objects().await;
            if objects.iter().any(|(k, _)| *k == key) {
                Ok(())
            } else {
                Err(format!(
                    "objects: {:?}",
                    objects.iter().map(|(k, _)| k).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
}

async fn archived_records(minio: &Minio, names: &[SegmentName]) -> Vec<Record> {
    let mut sorted = names.to_vec();
    sorted.sort();
    let mut records = Vec::new();
    for name in sorted {
        let (bytes, _) = super::stored_object(minio, &name.key(PREFIX)).await;
        records.extend(archive::decode(name, &bytes).or_panic());
    }
    records
}

/// etcd's own history of revisions `from..=to`, from a watch.
async fn history(client: &mut Client, from: i64, to: i64) -> Vec<Record> {
    let options = WatchOptions::new()
        .with_all_keys()
        .with_start_revision(from);
    let mut stream = client.watch("", Some(options)).await.or_panic();
    let mut records = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while records.last().is_none_or(|r: &Record| r.mod_revision < to) {
            let response = stream.message().await.or_panic().or_panic_none("the watch");
            records.extend(response.events().iter().filter_map(record_of));
        }
    })
    .await
    .or_panic();
    records
}

/// Every key and value at `revision`.
async fn keys_at(client: &mut Client, revision: i64) -> BTreeMap<String, String> {
    let answer = client
        .get(
            "",
            Some(GetOptions::new().with_all_keys().with_revision(revision)),
        )
        .await
        .or_panic();
    answer
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect()
}

/// SIGTERM the archiver; it flushes and exits 0.
async fn terminate(running: Running) {
    sigterm(&running);
    let run = running
        .finish(Duration::from_secs(30), "the archiver after SIGTERM")
        .await;
    run.assert_code(0, "the archiver's SIGTERM exit");
}

#[tokio::test]
async fn an_archiver_behind_a_compaction_stops_naming_the_gap_or_continues_past_it() {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let config = EtcdConfig::new("behind", "behind-token").or_panic();
    let etcd = Etcd::start(
        &bins.binary("etcd-3.6", "etcd").or_panic(),
        &config,
        &root.join("behind"),
        &root.join("logs"),
    )
    .await
    .or_panic();
    let mut client = etcd.client().await.or_panic();
    write_phase(&mut client, "early", 0..10, 0).await;
    let archiver = Agent::new(
        root,
        &[
            "archive",
            &format!("--endpoints={}", config.client_url),
            "--flush-interval=200ms",
            &format!("--s3-key={PREFIX}"),
        ],
    )
    .s3(&minio, &minio.writer);
    let running = archiver.start("archive-early");
    let archived = current_revision(&mut client).await;
    wait_for_archive(&minio, archived).await;
    terminate(running).await;

    // While it is stopped the cluster moves on and compacts what the archive has not seen.
    write_phase(&mut client, "late", 0..10, 0).await;
    let compacted = current_revision(&mut client).await;
    client.compact(compacted, None).await.or_panic();

    let run = archiver
        .start("archive-late")
        .finish(Duration::from_secs(60), "the archiver after a compaction")
        .await;
    run.assert_code(2, "an archiver behind a compaction");
    let error = run.result["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains(&format!("watch from revision {}", archived + 1))
            && error.contains(&format!("compacted up to revision {compacted}")),
        "the failure names both revisions: {error}"
    );
    assert_eq!(
        Window::of(&segment_names(&minio).await).last,
        Some(archived),
        "the archive still ends where it did: nothing after the gap was written"
    );

    // The operator's archiver (`--on-compaction=continue`) archives on from the oldest revision
    // the cluster has: the revisions lost to the compaction are a gap between two segments.
    let continuing = Agent::new(
        root,
        &[
            "archive",
            &format!("--endpoints={}", config.client_url),
            "--flush-interval=200ms",
            "--on-compaction=continue",
            &format!("--s3-key={PREFIX}"),
        ],
    )
    .s3(&minio, &minio.writer)
    .start("archive-continue");
    write_phase(&mut client, "after", 0..5, 0).await;
    let newest = current_revision(&mut client).await;
    wait_for_archive(&minio, newest).await;
    terminate(continuing).await;
    let window = Window::of(&segment_names(&minio).await);
    assert_eq!(
        window.gaps,
        [(archived + 1, compacted - 1)],
        "exactly the compacted revisions are missing: {window:?}"
    );
    assert_eq!(window.first, Some(compacted), "{window:?}");
    assert_eq!(window.last, Some(newest), "{window:?}");
    assert!(window.overlaps.is_empty(), "{window:?}");
    etcd.stop();
}
