//! etcd's answers, classified: every quirk of how etcd refuses a call is named here once, so that
//! no caller matches strings.

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

/// How etcd refused a call on authentication grounds (etcd's rpctypes errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthRefusal {
    /// Auth is on and the call came without a user (ErrUserEmpty, ErrPermissionDenied).
    Required,
    /// The root password was wrong (ErrAuthFailed), or the token is no longer valid.
    Rejected,
    /// Credentials were presented but auth is off (ErrAuthNotEnabled).
    NotEnabled,
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
            }
            | EtcdError::Unreachable {
                source: etcd_client::Error::GRpcStatus(status),
                ..
            } => Some((status.code() as i32, status.message())),
            _ => None,
        }
    }

    /// etcd refused the call (or the login while dialing) on authentication grounds.
    pub fn auth_refusal(&self) -> Option<AuthRefusal> {
        let (_, m) = self.grpc()?;
        if m.contains("authentication is not enabled") {
            Some(AuthRefusal::NotEnabled)
        } else if m.contains("authentication failed") || m.contains("invalid auth token") {
            Some(AuthRefusal::Rejected)
        } else if m.contains("user name is empty")
            || m.contains("permission denied")
            || m.contains("insufficient credentials")
        {
            Some(AuthRefusal::Required)
        } else {
            None
        }
    }

    pub(super) fn is_user_not_found(&self) -> bool {
        self.grpc()
            .is_some_and(|(_, m)| m.contains("user name not found"))
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

    /// A learner add that etcd refused because the cluster holds as many learners as a member's
    /// `--max-learners` allows (`FailedPrecondition`, ErrTooManyLearners). Not a failure: the
    /// operator adds the next once a learner is promoted.
    pub fn is_too_many_learners(&self) -> bool {
        self.grpc().is_some_and(|(c, m)| {
            c == code::FAILED_PRECONDITION && m.contains("too many learner members")
        })
    }

    /// A LeaseGrant of an ID the member already holds (`FailedPrecondition`, ErrLeaseExist):
    /// a replay granting a lease its base snapshot brought along.
    pub fn is_lease_exists(&self) -> bool {
        self.grpc().is_some_and(|(c, m)| {
            c == code::FAILED_PRECONDITION && m.contains("lease already exists")
        })
    }

    /// A message stable across retries (no addresses or ports), for conditions.
    pub fn stable_message(&self) -> String {
        match self {
            EtcdError::Unreachable { .. } => "cannot reach any voter of the cluster".to_string(),
            other => other.to_string(),
        }
    }
}
