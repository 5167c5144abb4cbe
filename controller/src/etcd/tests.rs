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
    assert!(answered(tonic::Code::NotFound, "etcdserver: member not found").is_member_not_found());
    assert!(!not_ready.is_member_not_found());
    let too_soon = answered(tonic::Code::Unavailable, "etcdserver: unhealthy cluster");
    assert!(too_soon.is_reconfig_too_soon());
    // Unavailable for another reason (no leader, connection refused) is a real failure.
    assert!(!answered(tonic::Code::Unavailable, "etcdserver: no leader").is_reconfig_too_soon());
    let exists = answered(
        tonic::Code::FailedPrecondition,
        "etcdserver: lease already exists",
    );
    assert!(exists.is_lease_exists());
    assert!(!not_ready.is_lease_exists());
    assert!(!answered(
        tonic::Code::NotFound,
        "etcdserver: requested lease not found"
    )
    .is_lease_exists());
}

#[test]
fn auth_refusals_are_told_apart_by_etcds_messages() {
    // etcd's own texts (server/etcdserver/api/v3rpc/rpctypes), as a call or as the login
    // while dialing.
    let login = |code, message: &str| EtcdError::Unreachable {
        endpoints: "https://m:2379".into(),
        source: etcd_client::Error::GRpcStatus(tonic::Status::new(code, message)),
    };
    assert_eq!(
        answered(
            tonic::Code::InvalidArgument,
            "etcdserver: user name is empty"
        )
        .auth_refusal(),
        Some(AuthRefusal::Required)
    );
    assert_eq!(
        answered(
            tonic::Code::PermissionDenied,
            "etcdserver: permission denied"
        )
        .auth_refusal(),
        Some(AuthRefusal::Required)
    );
    assert_eq!(
        login(
            tonic::Code::InvalidArgument,
            "etcdserver: authentication failed, invalid user ID or password"
        )
        .auth_refusal(),
        Some(AuthRefusal::Rejected)
    );
    assert_eq!(
        login(
            tonic::Code::FailedPrecondition,
            "etcdserver: authentication is not enabled"
        )
        .auth_refusal(),
        Some(AuthRefusal::NotEnabled)
    );
    assert_eq!(
        answered(tonic::Code::Unavailable, "etcdserver: no leader").auth_refusal(),
        None
    );
}

#[test]
fn ids_are_sixteen_lowercase_hex_digits_and_round_trip() {
    assert_eq!(format_id(0xabc), "0000000000000abc");
    assert_eq!(parse_id("0000000000000abc"), Some(0xabc));
    assert_eq!(parse_id("zz"), None);
}
