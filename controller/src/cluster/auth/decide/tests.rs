use super::*;

#[test]
fn a_rejected_login_tries_the_recorded_passwords_before_holding_the_cluster() {
    let step = after_refusal(Some(AuthRefusal::Rejected), true, true, true);
    assert_eq!(step, AuthStep::RotatePassword);
    // Without a login, a rejection is not about the user's password.
    let step = after_refusal(Some(AuthRefusal::Rejected), false, true, true);
    assert_eq!(step, AuthStep::Nothing);
}

#[test]
fn etcd_demanding_a_login_holds_a_cluster_without_spec_auth_and_latches_one_with_it() {
    let step = after_refusal(Some(AuthRefusal::Required), false, false, false);
    assert_eq!(step, AuthStep::RequiredNotConfigured);
    let step = after_refusal(Some(AuthRefusal::Required), false, true, true);
    assert_eq!(step, AuthStep::Latch(true));
    // spec.auth without a usable Secret: its own problem is reported already.
    let step = after_refusal(Some(AuthRefusal::Required), false, true, false);
    assert_eq!(step, AuthStep::Nothing);
    assert_eq!(
        after_anonymous_probe(true, false, false),
        AuthStep::RequiredNotConfigured
    );
    assert_eq!(
        after_anonymous_probe(true, true, true),
        AuthStep::Latch(true)
    );
    assert_eq!(after_anonymous_probe(false, true, true), AuthStep::Nothing);
}

#[test]
fn auth_turned_off_behind_the_operators_back_is_latched_off() {
    let step = after_refusal(Some(AuthRefusal::NotEnabled), true, true, true);
    assert_eq!(step, AuthStep::Latch(false));
    assert_eq!(after_refusal(None, true, true, true), AuthStep::Nothing);
}

#[test]
fn etcd_is_not_dialed_when_auth_is_on_and_no_password_is_at_hand() {
    assert!(cannot_log_in(true, true, false));
    assert!(!cannot_log_in(true, true, true));
    assert!(!cannot_log_in(false, true, false));
}
