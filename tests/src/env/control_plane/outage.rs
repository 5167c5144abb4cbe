//! Outages of the control plane's own components, for the fault suites: the kube-apiserver and
//! the control plane's etcd stopped and started again on the same ports with the same data and
//! flags (clients and watches reconnect; resourceVersions continue from etcd's data), and the
//! node lifecycle controllers that turn a Node whose heartbeat stopped NotReady.

use std::time::{Duration, Instant};

use kube::Client;

use super::{etcd_healthy, get_text, wait_until, ControlPlane, APISERVER_READY_TIMEOUT};
use super::{Error, Process, ETCD_READY_TIMEOUT};

/// kube-controller-manager's controllers that act on a Node whose kubelet stopped reporting:
/// the node lifecycle controller (Ready → Unknown, the `node.kubernetes.io/unreachable` taints)
/// and the taint eviction controller (deletes the Pods that do not tolerate `NoExecute`).
pub const NODE_LIFECYCLE_CONTROLLERS: &[&str] =
    &["node-lifecycle-controller", "taint-eviction-controller"];

/// The timings of [`ControlPlaneBuilder::with_node_lifecycle`](super::ControlPlaneBuilder::with_node_lifecycle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeLifecycle {
    /// `--node-monitor-grace-period`: a Node whose Lease and status have not been renewed for
    /// this long is marked `Ready=Unknown` (default 50 s). The pod runner renews its Leases every
    /// 10 s, so keep it well above that on a loaded machine.
    pub grace: Duration,
    /// The apiserver's `--default-unreachable-toleration-seconds` and
    /// `--default-not-ready-toleration-seconds`: how long a Pod without its own toleration stays
    /// on such a Node before the taint eviction controller deletes it (default 300 s).
    pub toleration: Duration,
}

impl Default for NodeLifecycle {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(30),
            toleration: Duration::from_secs(10),
        }
    }
}

impl NodeLifecycle {
    pub(super) fn apiserver_args(&self) -> Vec<String> {
        let seconds = self.toleration.as_secs();
        vec![
            format!("--default-unreachable-toleration-seconds={seconds}"),
            format!("--default-not-ready-toleration-seconds={seconds}"),
        ]
    }

    pub(super) fn controller_manager_args(&self) -> Vec<String> {
        vec![
            format!("--node-monitor-grace-period={}s", self.grace.as_secs()),
            "--node-monitor-period=2s".into(),
            // A test Node that never reported within the start-up grace would be NotReady too.
            format!("--node-startup-grace-period={}s", self.grace.as_secs()),
        ]
    }
}

/// How long a stopped component gets to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// The kube-apiserver's process name in [`ControlPlane::processes`].
pub const APISERVER: &str = "kube-apiserver";
/// The control plane's etcd's process name in [`ControlPlane::processes`].
pub const ETCD: &str = "etcd";
/// kube-scheduler's process name in [`ControlPlane::processes`].
pub const SCHEDULER: &str = "kube-scheduler";

impl ControlPlane {
    /// The node lifecycle timings it runs with, if it runs those controllers.
    pub fn node_lifecycle(&self) -> Option<NodeLifecycle> {
        self.node_lifecycle
    }

    /// The running component `name` (`kube-apiserver`, `etcd`, `kube-controller-manager`,
    /// `kube-scheduler`).
    pub fn process(&self, name: &str) -> Result<&Process, Error> {
        self.processes
            .iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "this control plane runs no {name} (it runs {})",
                    self.processes
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }

    /// Stop the kube-apiserver (SIGTERM, its graceful shutdown, SIGKILL after 15 s; `crash`:
    /// SIGKILL at once). Every client's requests fail and its watches end until
    /// [`ControlPlane::start_apiserver_again`].
    pub async fn stop_apiserver(&self, crash: bool) -> Result<(), Error> {
        self.process(APISERVER)?.stop(grace(crash)).await;
        Ok(())
    }

    /// Start the kube-apiserver again with the same flags (port, etcd, certificates) and wait
    /// until its `/readyz` answers `ok`.
    pub async fn start_apiserver_again(&self) -> Result<(), Error> {
        let apiserver = self.process(APISERVER)?;
        apiserver.start_again()?;
        self.wait_apiserver_ready().await
    }

    /// [`ControlPlane::stop_apiserver`] then [`ControlPlane::start_apiserver_again`]; returns
    /// how long the API was down (stop to ready).
    pub async fn restart_apiserver(&self, crash: bool) -> Result<Duration, Error> {
        let began = Instant::now();
        self.stop_apiserver(crash).await?;
        self.start_apiserver_again().await?;
        Ok(began.elapsed())
    }

    /// Restart kube-scheduler (SIGTERM, then the same flags again; started again too when it has
    /// exited), as a control plane's supervisor restarts a component: kube-scheduler 1.37 can
    /// come out of a kube-apiserver restart with a corrupted cache, and either exits ("Pod
    /// updated on a different node than previously added to") or goes on with a ghost of a
    /// deleted Pod that keeps a member's successor Pending for good; a restart lists everything
    /// afresh.
    pub async fn restart_scheduler(&self) -> Result<(), Error> {
        let scheduler = self.process(SCHEDULER)?;
        scheduler.stop(grace(false)).await;
        scheduler.start_again()?;
        Ok(())
    }

    /// Stop the control plane's etcd (`crash` as in [`ControlPlane::stop_apiserver`]): the
    /// apiserver stays up but cannot read or write, and its watch cache loses its etcd watches.
    pub async fn stop_etcd(&self, crash: bool) -> Result<(), Error> {
        self.process(ETCD)?.stop(grace(crash)).await;
        Ok(())
    }

    /// Start the control plane's etcd again on the same ports and data directory, and wait until
    /// it is healthy and the apiserver is ready on it again.
    pub async fn start_etcd_again(&self) -> Result<(), Error> {
        let etcd = self.process(ETCD)?;
        etcd.start_again()?;
        let port = self
            .etcd_url
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .ok_or_else(|| Error::Unsupported(format!("no port in {}", self.etcd_url)))?;
        wait_until(
            &format!(
                "the control plane's etcd /health on {} again",
                self.etcd_url
            ),
            ETCD_READY_TIMEOUT,
            &[etcd],
            &self.log_dir,
            || etcd_healthy(etcd.pid(), port),
        )
        .await?;
        self.wait_apiserver_ready().await
    }

    /// [`ControlPlane::stop_etcd`] then [`ControlPlane::start_etcd_again`]; returns how long
    /// etcd was down (stop to the apiserver ready again).
    pub async fn restart_etcd(&self, crash: bool) -> Result<Duration, Error> {
        let began = Instant::now();
        self.stop_etcd(crash).await?;
        self.start_etcd_again().await?;
        Ok(began.elapsed())
    }

    /// Wait for the apiserver's `/readyz`, failing early only if the apiserver or its etcd
    /// exits: the other components are its clients, and one may exit across the outage as it
    /// would on a real control plane, where its supervisor starts it again. kube-scheduler 1.37
    /// does (`klog.FlushAndExit(…, 1)` in its cache's `UpdatePod` when a Pod's update names
    /// another Node than the one its cache holds for that Pod, which a bind lost in the outage
    /// leaves behind; seen once in six runs of fault 2); see [`ControlPlane::restart_scheduler`].
    async fn wait_apiserver_ready(&self) -> Result<(), Error> {
        let mut config = self.config.clone();
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(10));
        let probe = Client::try_from(config).map_err(Error::kube("building a client"))?;
        let watched: Vec<&Process> = self
            .processes
            .iter()
            .filter(|p| [APISERVER, ETCD].contains(&p.name()))
            .collect();
        wait_until(
            &format!("kube-apiserver /readyz on {} again", self.server_url),
            APISERVER_READY_TIMEOUT,
            &watched,
            &self.log_dir,
            || get_text(probe.clone(), "/readyz"),
        )
        .await
    }
}

fn grace(crash: bool) -> Duration {
    if crash {
        Duration::ZERO
    } else {
        STOP_GRACE
    }
}
