//! Following a mounted Secret as it rotates. The kubelet updates a Secret volume by writing a
//! new timestamped directory and atomically swapping the `..data` symlink that `tls.crt` and
//! `tls.key` point through; cert-manager renewals arrive this way. [`CertReloader`] watches the
//! directory (inotify via `notify`) and also re-reads it periodically — events can be missed,
//! e.g. when the directory did not exist yet — and stores each new valid pair in its
//! [`CertResolver`], so the next handshake presents it.
//!
//! A new pair that fails to parse, whose key does not belong to its certificate, or whose
//! certificate is expired or not valid yet, is refused: the previous certificate keeps serving,
//! a warning is logged and [`ReloadStats::failures`] counts it (once per distinct broken
//! content, not once per re-read). A certificate refused as not valid yet is judged again on
//! every re-read and served once its time comes — issuers backdate little, so a node clock a
//! few seconds behind must not keep a renewal out until the next one.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::pem;
use crate::server::{certified_key_from_pem, check_validity, CertResolver, KeyPairError};

/// Default period of the re-read that backs up the directory watch.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(30);
/// How long to let a burst of file events settle before reading.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Counters of a reloader, for metrics.
#[derive(Debug, Default)]
pub struct ReloadStats {
    reloads: AtomicU64,
    failures: AtomicU64,
    last_reload_unix_seconds: AtomicU64,
}

impl ReloadStats {
    /// Certificates loaded (the first one included).
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// New certificate/key contents that were refused (unreadable, unparsable, mismatched, or
    /// outside their validity period).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// When the current certificate was loaded (0 = never).
    pub fn last_reload_unix_seconds(&self) -> u64 {
        self.last_reload_unix_seconds.load(Ordering::Relaxed)
    }
}

/// What one re-read did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// A new pair is serving.
    Loaded,
    /// Same content as the last attempt (served, or already refused and counted).
    Unchanged,
    /// New content was refused; the previous certificate (if any) keeps serving.
    Rejected(KeyPairError),
}

/// What was last read, to tell a rotation from a re-read of the same files.
#[derive(PartialEq, Eq)]
enum Seen {
    Content { cert: Vec<u8>, key: Vec<u8> },
    Unreadable(String),
}

/// The last read and whether its refusal was only for being early (then it is judged again).
struct LastRead {
    seen: Seen,
    early: bool,
}

/// Watches a certificate/key pair on disk and keeps a [`CertResolver`] current.
pub struct CertReloader {
    cert: PathBuf,
    key: PathBuf,
    resync: Duration,
    resolver: Arc<CertResolver>,
    stats: Arc<ReloadStats>,
    last_read: Mutex<Option<LastRead>>,
}

impl CertReloader {
    /// Follow `cert` and `key` (any paths; usually `<dir>/tls.crt` and `<dir>/tls.key`).
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
            resync: DEFAULT_RESYNC,
            resolver: Arc::new(CertResolver::new()),
            stats: Arc::new(ReloadStats::default()),
            last_read: Mutex::new(None),
        }
    }

    /// Follow `tls.crt` and `tls.key` of a mounted `kubernetes.io/tls` Secret.
    pub fn for_secret_dir(dir: &Path) -> Self {
        Self::new(dir.join("tls.crt"), dir.join("tls.key"))
    }

    /// Period of the re-read that backs up the directory watch (default 30 s).
    pub fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = resync.max(Duration::from_millis(10));
        self
    }

    /// The resolver to build a server config around; it follows every reload.
    pub fn resolver(&self) -> Arc<CertResolver> {
        self.resolver.clone()
    }

    pub fn stats(&self) -> Arc<ReloadStats> {
        self.stats.clone()
    }

    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    fn last_read(&self) -> MutexGuard<'_, Option<LastRead>> {
        // A panic while holding the lock leaves a plain value behind; keep using it.
        self.last_read.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read both files so that they come from one revision of the Secret: the kubelet never
    /// modifies a published revision, so if the resolved path of the certificate is the same
    /// before and after reading, the key read in between is from the same swap.
    fn read_pair(&self) -> Result<(Vec<u8>, Vec<u8>), pem::PemError> {
        let mut attempt = 0;
        loop {
            let before = std::fs::canonicalize(&self.cert).ok();
            let cert = pem::read_file(&self.cert)?;
            let key = pem::read_file(&self.key)?;
            let after = std::fs::canonicalize(&self.cert).ok();
            attempt += 1;
            if before == after || attempt >= 3 {
                return Ok((cert, key));
            }
        }
    }

    /// Re-read the files now and serve them if they are new and valid.
    pub fn reload_now(&self) -> ReloadOutcome {
        self.reload_at(SystemTime::now())
    }

    /// [`CertReloader::reload_now`] with the clock read by the caller.
    fn reload_at(&self, now: SystemTime) -> ReloadOutcome {
        let mut last_read = self.last_read();
        let seen = match self.read_pair() {
            Ok((cert, key)) => Seen::Content { cert, key },
            Err(err) => {
                let seen = Seen::Unreadable(err.to_string());
                if last_read.as_ref().is_some_and(|last| last.seen == seen) {
                    return ReloadOutcome::Unchanged;
                }
                *last_read = Some(LastRead { seen, early: false });
                return self.refuse(err.into());
            }
        };
        // Content refused as early was counted then; judging it again is not a new failure.
        let judged_before = match last_read.as_ref() {
            Some(last) if last.seen == seen && !last.early => return ReloadOutcome::Unchanged,
            Some(last) => last.seen == seen,
            None => false,
        };
        let Seen::Content { cert, key } = &seen else {
            return ReloadOutcome::Unchanged;
        };
        let verdict = certified_key_from_pem(cert, key, &self.cert, &self.key)
            .and_then(|certified| check_validity(&certified, &self.cert, now).map(|()| certified));
        let early = matches!(verdict, Err(KeyPairError::NotYetValid { .. }));
        *last_read = Some(LastRead { seen, early });
        match verdict {
            Ok(certified) => {
                self.resolver.store(Arc::new(certified));
                self.stats.reloads.fetch_add(1, Ordering::Relaxed);
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs();
                self.stats
                    .last_reload_unix_seconds
                    .store(now, Ordering::Relaxed);
                tracing::info!(cert = %self.cert.display(), "serving certificate loaded");
                ReloadOutcome::Loaded
            }
            Err(_) if judged_before => ReloadOutcome::Unchanged,
            Err(err) => self.refuse(err),
        }
    }

    fn refuse(&self, err: KeyPairError) -> ReloadOutcome {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        if self.resolver.is_loaded() {
            tracing::warn!(error = %err, "refusing the new serving certificate; the previous one keeps serving");
        } else {
            tracing::warn!(error = %err, "no usable serving certificate yet; TLS handshakes fail until one appears");
        }
        ReloadOutcome::Rejected(err)
    }

    /// The directories whose entries change when the Secret rotates.
    fn watched_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = [&self.cert, &self.key]
            .iter()
            .filter_map(|p| p.parent())
            .map(|p| {
                if p.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    p.to_path_buf()
                }
            })
            .collect();
        dirs.dedup();
        dirs
    }

    fn watch(&self, wake: &mpsc::Sender<()>) -> Result<RecommendedWatcher, notify::Error> {
        let wake = wake.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Our own reads raise open/access events; reacting to them would loop.
                if let Ok(event) = &event {
                    if matches!(event.kind, EventKind::Access(_)) {
                        return;
                    }
                }
                // A full channel already holds a wake-up: nothing is lost.
                let _ = wake.try_send(());
            })?;
        for dir in self.watched_dirs() {
            watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        }
        Ok(watcher)
    }

    /// Load now, then follow the files until `shutdown` completes.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let (wake, mut woken) = mpsc::channel::<()>(1);
        let mut watcher: Option<RecommendedWatcher> = None;
        let mut resync = tokio::time::interval(self.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if watcher.is_none() {
                match self.watch(&wake) {
                    Ok(w) => watcher = Some(w),
                    // Typically the directory does not exist yet; the periodic re-read covers
                    // it and the watch is retried on every tick.
                    Err(err) => {
                        tracing::debug!(error = %err, "cannot watch the certificate directory yet")
                    }
                }
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = resync.tick() => {}
                Some(()) = woken.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while woken.try_recv().is_ok() {}
                }
            }
            let this = self.clone();
            // File reads and key parsing block; keep them off the async workers.
            if let Err(err) = tokio::task::spawn_blocking(move || this.reload_now()).await {
                tracing::error!(error = %err, "certificate reload task failed");
            }
        }
    }

    /// [`CertReloader::run`] on a task of its own.
    pub fn spawn(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mint::{SecretMount, TestCa};

    #[test]
    fn broken_rotation_is_counted_once_and_the_old_pair_keeps_serving() {
        let tmp = tempfile::tempdir().unwrap();
        let mount = SecretMount::new(tmp.path().join("tls")).unwrap();
        let ca = TestCa::new("reload-test").unwrap();
        let good = ca.server_cert(&["localhost"]).unwrap();
        mount.write_tls(&good, None).unwrap();

        let reloader = CertReloader::for_secret_dir(mount.dir());
        assert!(matches!(reloader.reload_now(), ReloadOutcome::Loaded));
        assert!(matches!(reloader.reload_now(), ReloadOutcome::Unchanged));

        mount
            .write_tls_pem(b"garbage", good.key_pem.as_bytes(), None)
            .unwrap();
        assert!(matches!(reloader.reload_now(), ReloadOutcome::Rejected(_)));
        assert!(matches!(reloader.reload_now(), ReloadOutcome::Unchanged));
        let stats = reloader.stats();
        assert_eq!((stats.reloads(), stats.failures()), (1, 1));
        let served = reloader.resolver().current().unwrap();
        assert_eq!(served.end_entity_cert().unwrap(), &good.cert_der);
    }

    #[test]
    fn early_certificate_is_counted_once_and_served_when_its_time_comes() {
        let tmp = tempfile::tempdir().unwrap();
        let mount = SecretMount::new(tmp.path().join("tls")).unwrap();
        let ca = TestCa::new("reload-test").unwrap();
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let good = ca.server_cert(&["localhost"]).unwrap();
        let early = ca
            .server_cert_valid(&["localhost"], now + hour..now + 48 * hour)
            .unwrap();
        mount.write_tls(&good, None).unwrap();
        let reloader = CertReloader::for_secret_dir(mount.dir());
        assert!(matches!(reloader.reload_at(now), ReloadOutcome::Loaded));

        mount.write_tls(&early, None).unwrap();
        let ReloadOutcome::Rejected(err) = reloader.reload_at(now) else {
            panic!("a certificate not valid yet must be refused");
        };
        assert!(matches!(err, KeyPairError::NotYetValid { .. }), "{err}");
        assert!(matches!(reloader.reload_at(now), ReloadOutcome::Unchanged));
        let served = reloader.resolver().current().unwrap();
        assert_eq!(served.end_entity_cert().unwrap(), &good.cert_der);

        assert!(matches!(
            reloader.reload_at(now + 2 * hour),
            ReloadOutcome::Loaded
        ));
        assert!(matches!(
            reloader.reload_at(now + 2 * hour),
            ReloadOutcome::Unchanged
        ));
        let stats = reloader.stats();
        assert_eq!((stats.reloads(), stats.failures()), (2, 1));
        let served = reloader.resolver().current().unwrap();
        assert_eq!(served.end_entity_cert().unwrap(), &early.cert_der);
    }

    #[test]
    fn missing_files_are_a_failure_until_they_appear() {
        let tmp = tempfile::tempdir().unwrap();
        let reloader = CertReloader::for_secret_dir(&tmp.path().join("not-yet"));
        let ReloadOutcome::Rejected(err) = reloader.reload_now() else {
            panic!("a missing file must be refused");
        };
        assert!(err.to_string().contains("not-yet/tls.crt"), "{err}");
        assert!(!reloader.resolver().is_loaded());
    }
}
