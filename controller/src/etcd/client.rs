//! The etcd client: membership, auth and maintenance calls against a cluster's members. Every
//! call is bounded in time and its latency recorded. Only [`super::access`] dials.

use std::time::{Duration, Instant};

use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Certificate, Client, ConnectOptions, GetOptions,
    Identity, MemberAddOptions, TlsOptions,
};

use super::{AuthRefusal, EtcdError, EtcdMemberInfo};
use crate::auth::{Credentials, ROOT, ROOT_ROLE};
use crate::metrics::Metrics;
use crate::tls::ClientTls;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the voters of one cluster. Cheap to clone (one gRPC channel underneath).
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    metrics: Metrics,
}

impl Etcd {
    /// Dials `endpoints` (`https://` ones with `tls`: the cluster's CA as the only trust anchor,
    /// the operator-client identity when the cluster uses mTLS; the server name checked against
    /// the member's DNS name), logged in as `root` with `creds` once auth is on.
    pub(super) async fn connect(
        endpoints: &[String],
        tls: Option<&ClientTls>,
        creds: Option<&Credentials>,
        metrics: Metrics,
    ) -> Result<Self, EtcdError> {
        Self::connect_with_timeout(endpoints, tls, creds, metrics, CALL_TIMEOUT).await
    }

    /// [`Etcd::connect`] with another bound on each call (a defragmentation takes longer than
    /// a membership call).
    pub(super) async fn connect_with_timeout(
        endpoints: &[String],
        tls: Option<&ClientTls>,
        creds: Option<&Credentials>,
        metrics: Metrics,
        call_timeout: Duration,
    ) -> Result<Self, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(call_timeout);
        if let Some(tls) = tls {
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(config);
        }
        if let Some(creds) = creds {
            // etcd's simple tokens expire after 5 idle minutes: log in again when one has.
            options = options
                .with_user(ROOT, creds.password.clone())
                .with_auto_token_refresh(true);
        }
        let started = Instant::now();
        let client = Client::connect(endpoints, Some(options)).await;
        metrics.observe_etcd("connect", started.elapsed(), client.is_ok());
        let client = client.map_err(|source| EtcdError::Unreachable {
            endpoints: endpoints.join(","),
            source,
        })?;
        Ok(Self { client, metrics })
    }

    /// `(cluster ID, members)`.
    pub async fn member_list(&mut self) -> Result<(u64, Vec<EtcdMemberInfo>), EtcdError> {
        let started = Instant::now();
        let res = self.client.member_list().await;
        self.metrics
            .observe_etcd("member_list", started.elapsed(), res.is_ok());
        let res = res.map_err(|source| EtcdError::Call {
            op: "MemberList",
            source,
        })?;
        let cluster_id = res
            .header()
            .ok_or(EtcdError::NoHeader("MemberList"))?
            .cluster_id();
        let members = res
            .members()
            .iter()
            .map(|m| EtcdMemberInfo {
                id: m.id(),
                name: m.name().to_string(),
                peer_urls: m.peer_urls().to_vec(),
                is_learner: m.is_learner(),
            })
            .collect();
        Ok((cluster_id, members))
    }

    /// Returns the new member's ID.
    pub async fn member_add_as_learner(&mut self, peer_url: &str) -> Result<u64, EtcdError> {
        let started = Instant::now();
        let res = self
            .client
            .member_add([peer_url], Some(MemberAddOptions::new().with_is_learner()))
            .await;
        self.metrics
            .observe_etcd("member_add", started.elapsed(), res.is_ok());
        let res = res.map_err(|source| EtcdError::Call {
            op: "MemberAddAsLearner",
            source,
        })?;
        Ok(res.member().map(|m| m.id()).unwrap_or_default())
    }

    pub async fn member_promote(&mut self, id: u64) -> Result<(), EtcdError> {
        let started = Instant::now();
        let res = self.client.member_promote(id).await;
        self.metrics
            .observe_etcd("member_promote", started.elapsed(), res.is_ok());
        res.map(|_| ()).map_err(|source| EtcdError::Call {
            op: "MemberPromote",
            source,
        })
    }

    pub async fn member_remove(&mut self, id: u64) -> Result<(), EtcdError> {
        let started = Instant::now();
        let res = self.client.member_remove(id).await;
        self.metrics
            .observe_etcd("member_remove", started.elapsed(), res.is_ok());
        res.map(|_| ()).map_err(|source| EtcdError::Call {
            op: "MemberRemove",
            source,
        })
    }

    /// The version of the member this client is connected to (dial one endpoint for this).
    pub async fn version(&mut self) -> Result<String, EtcdError> {
        let started = Instant::now();
        let res = self.client.status().await;
        self.metrics
            .observe_etcd("status", started.elapsed(), res.is_ok());
        let res = res.map_err(|source| EtcdError::Call {
            op: "Status",
            source,
        })?;
        Ok(res.version().to_string())
    }
}

impl Etcd {
    async fn call<T>(
        &mut self,
        op: &'static str,
        metric: &str,
        fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, EtcdError> {
        let started = Instant::now();
        let res = fut.await;
        self.metrics
            .observe_etcd(metric, started.elapsed(), res.is_ok());
        res.map_err(|source| EtcdError::Call { op, source })
    }

    /// Whether etcd refuses a read without a user: auth is on. A one-key, count-only range: the
    /// cheapest call that auth guards (membership listing and status are not guarded).
    pub async fn anonymous_reads_refused(&mut self) -> Result<bool, EtcdError> {
        let options = GetOptions::new().with_count_only().with_limit(1);
        let mut kv = self.client.kv_client();
        match self
            .call("Range", "range", kv.get(vec![0u8], Some(options)))
            .await
        {
            Ok(_) => Ok(false),
            Err(e) if e.auth_refusal() == Some(AuthRefusal::Required) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Provision `root` with `creds`, grant it the `root` role and turn auth on. Idempotent: a
    /// `root` left by an interrupted attempt gets this password. Returns `false` when auth was
    /// already on (nothing was changed).
    pub async fn enable_root_auth(&mut self, creds: &Credentials) -> Result<bool, EtcdError> {
        let mut auth = self.client.auth_client();
        match self.call("UserGet", "user_get", auth.user_get(ROOT)).await {
            Err(e) if e.auth_refusal() == Some(AuthRefusal::Required) => return Ok(false),
            Err(e) if e.is_user_not_found() => {
                self.call(
                    "UserAdd",
                    "user_add",
                    auth.user_add(ROOT, creds.password.clone(), None),
                )
                .await?;
            }
            Err(e) => return Err(e),
            Ok(_) => {
                self.call(
                    "UserChangePassword",
                    "user_change_password",
                    auth.user_change_password(ROOT, creds.password.clone()),
                )
                .await?;
            }
        }
        self.call(
            "UserGrantRole",
            "user_grant_role",
            auth.user_grant_role(ROOT, ROOT_ROLE),
        )
        .await?;
        self.call("AuthEnable", "auth_enable", auth.auth_enable())
            .await?;
        Ok(true)
    }

    /// The leader's member ID as the member this client reaches sees it; `None` while there is
    /// none (an election).
    pub async fn leader(&mut self) -> Result<Option<u64>, EtcdError> {
        let mut maintenance = self.client.maintenance_client();
        let res = self.call("Status", "status", maintenance.status()).await?;
        Ok(Some(res.leader()).filter(|id| *id != 0))
    }

    /// Hand leadership to member `to`. etcd serves this on the leader only: dial the leader alone.
    pub async fn move_leader(&mut self, to: u64) -> Result<(), EtcdError> {
        let mut maintenance = self.client.maintenance_client();
        self.call("MoveLeader", "move_leader", maintenance.move_leader(to))
            .await
            .map(|_| ())
    }

    /// Set the root password (the client must be logged in as root).
    pub async fn change_root_password(&mut self, creds: &Credentials) -> Result<(), EtcdError> {
        let mut auth = self.client.auth_client();
        self.call(
            "UserChangePassword",
            "user_change_password",
            auth.user_change_password(ROOT, creds.password.clone()),
        )
        .await
        .map(|_| ())
    }
}

/// What one member reports about itself (the Maintenance `Status` call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberStatus {
    pub member_id: u64,
    /// The leader this member follows (0: none).
    pub leader: u64,
    pub db_size: i64,
    /// `dbSizeInUse`: the part of `db_size` holding live data.
    pub db_size_in_use: i64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    /// The raft term the member is in.
    pub raft_term: u64,
    /// The cluster ID and MVCC revision of the answer's header (the member's own view).
    pub cluster_id: u64,
    pub revision: i64,
    pub is_learner: bool,
    /// Errors the member reports about itself (alarms among them).
    pub errors: Vec<String>,
    /// The etcd server version the member runs (`3.6.5`).
    pub version: String,
}

/// An alarm etcd has raised on a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Alarm {
    /// The backend reached its quota: etcd refuses writes until the alarm is disarmed.
    NoSpace,
    /// The consistency checker found the member's data diverged.
    Corrupt,
}

impl Alarm {
    /// etcd's name for the alarm (`etcdctl alarm list` prints it).
    pub fn name(self) -> &'static str {
        match self {
            Alarm::NoSpace => "NOSPACE",
            Alarm::Corrupt => "CORRUPT",
        }
    }
}

/// Maintenance calls on the member(s) this client is connected to: dial one endpoint to address
/// one member.
impl Etcd {
    pub async fn member_status(&mut self) -> Result<MemberStatus, EtcdError> {
        let mut client = self.client.clone();
        let res = self.call("Status", "status", client.status()).await?;
        let header = res.header().ok_or(EtcdError::NoHeader("Status"))?;
        Ok(MemberStatus {
            member_id: header.member_id(),
            cluster_id: header.cluster_id(),
            revision: header.revision(),
            raft_term: res.raft_term(),
            leader: res.leader(),
            db_size: res.db_size(),
            db_size_in_use: res.raft_used_db_size(),
            raft_index: res.raft_index(),
            raft_applied_index: res.raft_applied_index(),
            is_learner: res.is_learner(),
            errors: res.errors().to_vec(),
            version: res.version().to_string(),
        })
    }

    /// A serializable one-key, count-only read served by the member this client is connected
    /// to: it waits while the member's backend is locked (a defragmentation holds it).
    pub async fn serializable_read(&mut self) -> Result<(), EtcdError> {
        let options = GetOptions::new()
            .with_count_only()
            .with_limit(1)
            .with_serializable();
        let mut kv = self.client.kv_client();
        self.call("Range", "range", kv.get(vec![0u8], Some(options)))
            .await
            .map(|_| ())
    }

    /// How many keys the cluster holds, and its revision: a linearizable count-only read of the
    /// whole key space (no key is transferred).
    pub async fn key_count(&mut self) -> Result<(i64, i64), EtcdError> {
        let options = GetOptions::new().with_count_only().with_from_key();
        let mut kv = self.client.kv_client();
        let res = self
            .call("Range", "range", kv.get(vec![0u8], Some(options)))
            .await?;
        let revision = res.header().map(|h| h.revision()).unwrap_or_default();
        Ok((res.count(), revision))
    }

    /// Defragment the member this client is connected to. etcd runs it to its end even when the
    /// caller gives up: never repeat one whose answer did not come.
    pub async fn defragment(&mut self) -> Result<(), EtcdError> {
        let mut client = self.client.clone();
        self.call("Defragment", "defragment", client.defragment())
            .await
            .map(|_| ())
    }

    /// The cluster's raised alarms: `(member ID, alarm)`.
    pub async fn alarms(&mut self) -> Result<Vec<(u64, Alarm)>, EtcdError> {
        let mut client = self.client.clone();
        let res = self
            .call(
                "AlarmList",
                "alarm_list",
                client.alarm(AlarmAction::Get, AlarmType::None, None),
            )
            .await?;
        Ok(res
            .alarms()
            .iter()
            .filter_map(|a| match a.alarm() {
                AlarmType::Nospace => Some((a.member_id(), Alarm::NoSpace)),
                AlarmType::Corrupt => Some((a.member_id(), Alarm::Corrupt)),
                AlarmType::None => None,
            })
            .collect())
    }

    /// Disarm the NOSPACE alarm raised for `member_id` (etcd keeps refusing writes until it is
    /// disarmed, even after space was freed).
    pub async fn disarm_nospace(&mut self, member_id: u64) -> Result<(), EtcdError> {
        let mut client = self.client.clone();
        let mut options = AlarmOptions::new();
        options.with_member(member_id);
        self.call(
            "AlarmDisarm",
            "alarm_disarm",
            client.alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(options)),
        )
        .await
        .map(|_| ())
    }
}
