//! The etcd seam: membership calls against a cluster, always through voters (a learner answers
//! `MemberList` and friends with "rpc not supported for learner"). Every call is bounded in time
//! and its latency recorded.

use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, MemberAddOptions, TlsOptions};

use crate::cluster::plan::EtcdMemberInfo;
use crate::metrics::Metrics;
use crate::tls::ClientTls;

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("no voter endpoint to dial")]
    NoEndpoints,
    #[error("cannot reach etcd at {endpoints}: {source}")]
    Unreachable {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("etcd {op} failed: {source}")]
    Call {
        op: &'static str,
        #[source]
        source: etcd_client::Error,
    },
    #[error("etcd {0} answered without a header")]
    NoHeader(&'static str),
}

/// gRPC status codes etcd answers with (google.golang.org/grpc/codes).
mod code {
    pub const NOT_FOUND: i32 = 5;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const UNAVAILABLE: i32 = 14;
}

impl EtcdError {
    /// The gRPC status of a call etcd answered, with its message.
    fn grpc(&self) -> Option<(i32, &str)> {
        match self {
            EtcdError::Call {
                source: etcd_client::Error::GRpcStatus(status),
                ..
            } => Some((status.code() as i32, status.message())),
            _ => None,
        }
    }

    /// A promote that etcd refused because the learner is still catching up
    /// (`FailedPrecondition`, ErrLearnerNotReady; the same code also means "not a learner").
    pub fn is_learner_not_ready(&self) -> bool {
        self.grpc().is_some_and(|(c, m)| {
            c == code::FAILED_PRECONDITION
                && (m.contains("not in sync") || m.contains("which is in sync"))
        })
    }

    /// MemberRemove of an ID etcd does not know: already removed (`NotFound`).
    pub fn is_member_not_found(&self) -> bool {
        self.grpc().is_some_and(|(c, _)| c == code::NOT_FOUND)
    }

    /// A membership change etcd refused for now (`Unavailable`, ErrUnhealthy "unhealthy
    /// cluster"): with strict reconfiguration checks, the member serving the call must have been
    /// connected to every voter for five seconds, which a just-promoted member is not yet.
    /// Retried after a second; it is not a failure.
    pub fn is_reconfig_too_soon(&self) -> bool {
        self.grpc()
            .is_some_and(|(c, m)| c == code::UNAVAILABLE && m.contains("unhealthy cluster"))
    }

    /// A message stable across retries (no addresses or ports), for conditions.
    pub fn stable_message(&self) -> String {
        match self {
            EtcdError::Unreachable { .. } => "cannot reach any voter of the cluster".to_string(),
            other => other.to_string(),
        }
    }
}

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
    /// the member's DNS name).
    pub async fn connect(
        endpoints: &[String],
        tls: Option<&ClientTls>,
        metrics: Metrics,
    ) -> Result<Self, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(CALL_TIMEOUT);
        if let Some(tls) = tls {
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(config);
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

pub fn format_id(id: u64) -> String {
    format!("{id:016x}")
}

pub fn parse_id(hex: &str) -> Option<u64> {
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: tonic::Code, message: &str) -> EtcdError {
        EtcdError::Call {
            op: "test",
            source: etcd_client::Error::GRpcStatus(tonic::Status::new(code, message)),
        }
    }

    #[test]
    fn etcd_refusals_are_classified_by_grpc_code_and_etcd_error() {
        // The texts are etcd's own (server/etcdserver/api/v3rpc/rpctypes).
        let not_ready = answered(
            tonic::Code::FailedPrecondition,
            "etcdserver: can only promote a learner member which is in sync with leader",
        );
        assert!(not_ready.is_learner_not_ready());
        assert!(!answered(
            tonic::Code::FailedPrecondition,
            "etcdserver: can only promote a learner member"
        )
        .is_learner_not_ready());
        assert!(
            answered(tonic::Code::NotFound, "etcdserver: member not found").is_member_not_found()
        );
        assert!(!not_ready.is_member_not_found());
        let too_soon = answered(tonic::Code::Unavailable, "etcdserver: unhealthy cluster");
        assert!(too_soon.is_reconfig_too_soon());
        // Unavailable for another reason (no leader, connection refused) is a real failure.
        assert!(!answered(tonic::Code::Unavailable, "etcdserver: no leader").is_reconfig_too_soon());
    }

    #[test]
    fn ids_are_sixteen_lowercase_hex_digits_and_round_trip() {
        assert_eq!(format_id(0xabc), "0000000000000abc");
        assert_eq!(parse_id("0000000000000abc"), Some(0xabc));
        assert_eq!(parse_id("zz"), None);
    }
}
