//! Pod status the way kubelet computes it (pkg/kubelet/kubelet_pods.go `getPhase` and the
//! condition generators), from the runner's record of each container. Pure: values in, JSON out.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

/// RFC 3339 at second precision, as the API stores `metav1.Time`.
pub fn time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// How a container instance ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

impl Terminated {
    fn json(&self) -> Value {
        let mut v = json!({
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": time(self.finished_at),
        });
        if let Some(s) = self.signal {
            v["signal"] = json!(s);
        }
        if let Some(m) = self.message.as_ref().filter(|m| !m.is_empty()) {
            v["message"] = json!(m);
        }
        if let Some(t) = self.started_at {
            v["startedAt"] = json!(time(t));
        }
        if let Some(id) = &self.container_id {
            v["containerID"] = json!(id);
        }
        v
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated(Terminated),
}

impl State {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        State::Waiting {
            reason: reason.to_string(),
            message,
        }
    }

    fn json(&self) -> Value {
        match self {
            State::Waiting { reason, message } => {
                let mut w = json!({"reason": reason});
                if let Some(m) = message.as_ref().filter(|m| !m.is_empty()) {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            State::Running { started_at } => json!({"running": {"startedAt": time(*started_at)}}),
            State::Terminated(t) => json!({"terminated": t.json()}),
        }
    }
}

/// The runner's view of one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub state: State,
    pub last: Option<Terminated>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
}

impl ContainerView {
    pub fn json(&self) -> Value {
        let mut v = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id,
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state.json(),
            "lastState": self.last.as_ref().map(|t| json!({"terminated": t.json()})).unwrap_or_else(|| json!({})),
        });
        if let Some(id) = &self.container_id {
            v["containerID"] = json!(id);
        }
        v
    }
}

/// kubelet's `getPhase`. `terminal` is set for a Pod being deleted whose containers all stopped.
pub fn phase(
    init: &[ContainerView],
    main: &[ContainerView],
    restart_policy: &str,
    terminal: bool,
) -> &'static str {
    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in init {
        match &c.state {
            State::Running { .. } => pending_init += 1,
            State::Terminated(t) => {
                if t.exit_code != 0 {
                    failed_init += 1;
                }
            }
            State::Waiting { .. } => match &c.last {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
        }
    }
    let initialized = init
        .iter()
        .all(|c| matches!(&c.state, State::Terminated(t) if t.exit_code == 0));
    if failed_init > 0 && restart_policy == "Never" {
        return "Failed";
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in main {
        match &c.state {
            State::Running { .. } => running += 1,
            State::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            State::Waiting { .. } => {
                if c.last.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if (pending_init > 0 && !initialized) || waiting > 0 {
        return if terminal { "Failed" } else { "Pending" };
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        if terminal {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if restart_policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if restart_policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    if terminal {
        "Failed"
    } else {
        "Pending"
    }
}

/// One condition kubelet owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub status: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Condition {
    /// `status` with no reason and no message.
    fn plain(status: bool) -> Self {
        Condition {
            status,
            reason: None,
            message: None,
        }
    }

    /// False for `reason`, with `message` when there is one.
    fn not(reason: &str, message: Option<String>) -> Self {
        Condition {
            status: false,
            reason: Some(reason.into()),
            message,
        }
    }

    /// False because these containers have not finished initialising.
    fn not_initialized(incomplete: &[&str]) -> Self {
        Condition::not(
            "ContainersNotInitialized",
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        )
    }
}

/// The conditions kubelet owns, by type.
pub fn conditions(
    sandbox_ready: bool,
    init: &[ContainerView],
    main: &[ContainerView],
    phase: &str,
    readiness_gates_ready: Result<(), Vec<String>>,
) -> BTreeMap<&'static str, Condition> {
    let completed = phase == "Succeeded" || phase == "Failed";
    let mut out = BTreeMap::new();
    out.insert("PodReadyToStartContainers", Condition::plain(sandbox_ready));
    let incomplete: Vec<&str> = init
        .iter()
        .filter(|c| !matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
        .map(|c| c.name.as_str())
        .collect();
    out.insert(
        "Initialized",
        if incomplete.is_empty() {
            Condition::plain(true)
        } else {
            Condition::not_initialized(&incomplete)
        },
    );
    let unready: Vec<&str> = main
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let containers_ready = if completed {
        Condition::not("PodCompleted", None)
    } else if !incomplete.is_empty() {
        Condition::not_initialized(&incomplete)
    } else if unready.is_empty() {
        Condition::plain(true)
    } else {
        Condition::not(
            "ContainersNotReady",
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let ready = if !containers_ready.status {
        containers_ready.clone()
    } else {
        match readiness_gates_ready {
            Ok(()) => containers_ready.clone(),
            Err(gates) => Condition {
                status: false,
                reason: Some("ReadinessGatesNotReady".into()),
                message: Some(format!("corresponding condition of pod readiness gate {:?} does not exist or is not True", gates.join(", "))),
            },
        }
    };
    out.insert("ContainersReady", containers_ready);
    out.insert("Ready", ready);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, state: State, last: Option<Terminated>) -> ContainerView {
        ContainerView {
            name: name.into(),
            image: "i".into(),
            image_id: "local://x".into(),
            container_id: None,
            state,
            last,
            restart_count: 0,
            ready: false,
            started: false,
        }
    }

    fn term(code: i32) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: None,
            finished_at: Timestamp::UNIX_EPOCH,
            container_id: None,
        }
    }

    fn running() -> State {
        State::Running {
            started_at: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn job_pods_end_succeeded_or_failed() {
        let ok = [view("c", State::Terminated(term(0)), None)];
        let bad = [view("c", State::Terminated(term(1)), None)];
        assert_eq!(phase(&[], &ok, "Never", false), "Succeeded");
        assert_eq!(phase(&[], &bad, "Never", false), "Failed");
        assert_eq!(phase(&[], &ok, "OnFailure", false), "Succeeded");
        let backoff = [view(
            "c",
            State::waiting("CrashLoopBackOff", None),
            Some(term(1)),
        )];
        assert_eq!(phase(&[], &backoff, "OnFailure", false), "Running");
        assert_eq!(phase(&[], &backoff, "Always", false), "Running");
    }

    #[test]
    fn init_containers_gate_the_pod() {
        let main = [view("c", State::waiting("PodInitializing", None), None)];
        let init_running = [view("i", running(), None)];
        assert_eq!(phase(&init_running, &main, "Always", false), "Pending");
        let init_failed = [view("i", State::Terminated(term(2)), None)];
        assert_eq!(phase(&init_failed, &main, "Never", false), "Failed");
        let init_done = [view("i", State::Terminated(term(0)), None)];
        assert_eq!(
            phase(&init_done, &[view("c", running(), None)], "Always", false),
            "Running"
        );
        let conds = conditions(true, &init_running, &main, "Pending", Ok(()));
        assert!(!conds["Initialized"].status);
        assert_eq!(
            conds["Initialized"].message.as_deref(),
            Some("containers with incomplete status: [i]")
        );
    }

    #[test]
    fn deleted_pods_become_terminal() {
        let killed = [view("c", State::Terminated(term(143)), None)];
        assert_eq!(phase(&[], &killed, "Always", true), "Failed");
        assert_eq!(phase(&[], &killed, "Always", false), "Running");
        let clean = [view("c", State::Terminated(term(0)), None)];
        assert_eq!(phase(&[], &clean, "Always", true), "Succeeded");
    }

    #[test]
    fn readiness_needs_every_container_and_gate() {
        let mut a = view("a", running(), None);
        a.ready = true;
        let b = view("b", running(), None);
        let conds = conditions(true, &[], &[a.clone(), b], "Running", Ok(()));
        assert!(!conds["Ready"].status);
        assert_eq!(
            conds["Ready"].message.as_deref(),
            Some("containers with unready status: [b]")
        );
        let conds = conditions(true, &[], &[a.clone()], "Running", Ok(()));
        assert!(conds["Ready"].status && conds["ContainersReady"].status);
        let conds = conditions(true, &[], &[a], "Running", Err(vec!["x".into()]));
        assert!(!conds["Ready"].status && conds["ContainersReady"].status);
    }
}
