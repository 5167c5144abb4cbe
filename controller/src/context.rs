//! What every reconcile shares: the API client, the operator's configuration, metrics and the
//! event recorder.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::etcd::access::Pool;
use crate::events::{Action, Reason};
use crate::metrics::Metrics;

pub use crate::config::{Config, DEFAULT_REPLACE_BROKEN_MEMBERS_AFTER};
pub use crate::naming::FIELD_MANAGER;

pub struct Context {
    pub client: Client,
    pub config: Config,
    pub metrics: Metrics,
    /// Whether cert-manager's API is installed (probed at start-up, re-asked while absent).
    pub cert_manager: crate::cert_manager::Detection,
    recorder: Recorder,
    /// The etcd clients kept across reconciles (see [`crate::etcd::access`]).
    pub etcd: Pool,
    /// `(cluster incarnation, password fingerprint)` pairs known to be in the cluster's
    /// entry of the auth record, so it is read once per operator run, not per reconcile.
    auth_recorded: Mutex<HashSet<(String, String)>>,
    /// When this process last wrote each cluster's `status.members[]` counters (raft index,
    /// database sizes), by cluster incarnation: they alone make a write only this rarely
    /// (see `cluster::roster`).
    counters_written: Mutex<HashMap<String, Instant>>,
}

impl Context {
    pub fn new(client: Client, config: Config, metrics: Metrics) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.to_string(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            client,
            config,
            metrics,
            cert_manager: Default::default(),
            recorder,
            etcd: Pool::default(),
            auth_recorded: Mutex::default(),
            counters_written: Mutex::default(),
        }
    }

    /// Whether this password was already seen in the cluster's auth record.
    pub fn auth_recorded(&self, key: &str, fingerprint: &str) -> bool {
        self.auth_recorded
            .lock()
            .is_ok_and(|s| s.contains(&(key.to_string(), fingerprint.to_string())))
    }

    pub fn mark_auth_recorded(&self, key: &str, fingerprint: &str) {
        if let Ok(mut s) = self.auth_recorded.lock() {
            s.insert((key.to_string(), fingerprint.to_string()));
        }
    }

    /// Whether `every` has passed since this process last wrote the cluster's member counters
    /// (always, the first time).
    pub fn counters_due(&self, key: &str, every: Duration) -> bool {
        self.counters_written
            .lock()
            .map_or(true, |w| w.get(key).is_none_or(|at| at.elapsed() >= every))
    }

    /// The cluster's member counters were just written; `None` forgets the cluster.
    pub fn counters_written(&self, key: &str, written: Option<Instant>) {
        if let Ok(mut w) = self.counters_written.lock() {
            match written {
                Some(at) => w.insert(key.to_string(), at),
                None => w.remove(key),
            };
        }
    }

    /// Publish a Kubernetes Event on `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: Reason,
        action: Action,
        note: String,
    ) {
        self.event_related(obj, None, warning, reason, action, note)
            .await
    }

    /// [`Context::event`] naming a second object (`related`): Events with the same reason and
    /// action on one object are kept apart per related object instead of folded into a series.
    pub async fn event_related<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        related: Option<k8s_openapi::api::core::v1::ObjectReference>,
        warning: bool,
        reason: Reason,
        action: Action,
        note: String,
    ) {
        let reason = reason.reason();
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(note),
            action: action.action().to_string(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not publish event");
        }
    }
}
