//! The CA set each member runs with, and the refusal of a CA change that running members would
//! not survive. Pure; the planner calls it, `tls` supplies the facts ([`CaTrust`]).
//!
//! etcd loads its CA bundles (`--peer-trusted-ca-file`, and `--trusted-ca-file` with client
//! mTLS) only at start-up, but re-reads its leaf certificate on every handshake. So once a
//! Secret changes, every running member presents the Secret's new certificate while it still
//! trusts the CAs it started with ([`api::labels::TRUSTED_CAS_ANNOTATION`] records them per
//! member). A new certificate from a CA those members do not trust (the Secret's `ca.crt` and
//! leaf moved to a new CA in one edit) cannot be rolled out: the first restarted member would
//! trust only the new CA and be refused by the others, and the rollout would wait forever. It is
//! refused instead, with the safe procedure (add the new CA, let it roll, then switch the
//! leaves, then drop the old CA). Members whose set is not known (never recorded, or recorded
//! as unknown on takeover) cannot refuse anything: they are rolled as before.

use crate::tls::{CaSet, CaTrust};

use super::view::MemberView;

/// The value recorded for a member whose trust bundle is not known: a Pod adopted (or from
/// before the operator recorded bundles) that started before its Secrets last changed may run
/// an older bundle. It differs from every fingerprint, so the member is rolled.
pub const UNKNOWN: &str = "unknown";

/// The CAs `m`'s running etcd trusts, as far as they are known: the set its Pod records, else
/// (a Pod from before the operator recorded sets) the current bundles' when the Pod started
/// with the current fingerprint `fp`, or records none at all (such a member is taken to run the
/// current bundle, as the rollout takes it). `None`: no running Pod, or not known.
pub fn running_set(m: &MemberView, fp: &str, current: &CaSet) -> Option<CaSet> {
    let pod = m.pod.as_ref().filter(|p| !p.terminating)?;
    if let Some(recorded) = &pod.trusted_cas {
        return CaSet::parse(recorded);
    }
    let started_with = pod.trust_bundle.as_ref().or(m.trust_bundle.as_ref());
    match started_with {
        None => Some(current.clone()),
        Some(t) if t == fp => Some(current.clone()),
        Some(_) => None,
    }
}

/// Whether `m`'s etcd started before the Secrets' CA bundles last changed (or in the same
/// second): it may have loaded an older bundle than they hold. Asked only for a member that
/// never recorded its bundle (adopted from another operator, whose runbook asks for a manual
/// bounce after a CA change, or from an operator version before bundles were recorded). `false`
/// when either time is unknown (a Pod whose etcd is not running loads the Secrets as they are
/// when it starts).
pub fn started_before_ca_change(m: &MemberView, trust: Option<&CaTrust>) -> bool {
    let started = m.pod.as_ref().and_then(|p| p.started);
    let changed = trust.and_then(|t| t.changed);
    matches!((started, changed), (Some(s), Some(c)) if s <= c)
}

/// Whether `m` runs the current bundle `fp` but does not record its CA set yet (a member from an
/// operator version before sets were recorded): recorded without a restart, so that a later
/// change is judged against it.
pub fn set_unrecorded(m: &MemberView, fp: &str) -> bool {
    m.trust_bundle.as_deref() == Some(fp)
        && m.pod.as_ref().is_some_and(|p| {
            p.trust_bundle.as_deref() == Some(fp)
                && (p.trusted_cas.is_none() || m.trusted_cas.is_none())
        })
}

/// Why the CA bundles in the Secrets now must not be rolled out, if they must not: a
/// certificate every member is presented from now on chains only to CAs that running members
/// `live` did not load. The message names the Secret, the members and the safe procedure.
pub fn unsafe_change(
    fp: Option<&str>,
    trust: Option<&CaTrust>,
    live: &[&MemberView],
) -> Option<String> {
    let (fp, trust) = (fp?, trust?);
    // A certificate that chains to no CA of the bundle is refused by the Secret checks
    // (`TLSSecretNotReady`) before this is asked; with nothing to compare, it refuses nothing.
    for presented in trust.presented.iter().filter(|p| !p.anchors.is_empty()) {
        let mut refusing = Vec::new();
        let mut loaded = std::collections::BTreeSet::new();
        for m in live
            .iter()
            .filter(|m| !m.pending && !m.dormant && !m.deleting)
        {
            let Some(set) = running_set(m, fp, &trust.bundles) else {
                continue;
            };
            let set = set.of(presented.bundle);
            // An empty set is no record of this bundle (nothing to judge by), not "trusts
            // nothing".
            if !set.is_empty() && set.is_disjoint(&presented.anchors) {
                refusing.push(m.name.as_str());
                loaded.extend(set.iter().cloned());
            }
        }
        if refusing.is_empty() {
            continue;
        }
        let list = |s: &std::collections::BTreeSet<String>| {
            s.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
        };
        return Some(format!(
            "the CA change of Secret {secret} ({origin}) is refused, no member is restarted: its \
             {what} (tls.crt) is issued by CA {new}, which member(s) {members} do not trust (they \
             loaded CA(s) {old} at start-up; etcd reads ca.crt only then). A member restarted \
             with the new ca.crt would be refused by them and the rollout would never finish. \
             Change the CA in steps: put back the previous tls.crt and tls.key with a ca.crt \
             holding both the old and the new CA, and let that roll (Progressing=True/\
             RollingRestart, then Reconciled); then re-issue tls.crt from the new CA; then \
             remove the old CA from ca.crt (see docs/tls.md, Certificate rotation)",
            secret = presented.secret,
            origin = presented.origin,
            what = presented.what,
            new = list(&presented.anchors),
            members = refusing.join(", "),
            old = list(&loaded),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::view::DataHome;
    use crate::pods::PodView;
    use crate::tls::{Bundle, Presented};
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeSet;

    fn set(fps: &[&str]) -> BTreeSet<String> {
        fps.iter().map(|s| s.to_string()).collect()
    }

    fn peer(fps: &[&str]) -> CaSet {
        CaSet {
            peer: set(fps),
            client: BTreeSet::new(),
        }
    }

    /// A member whose Pod started with fingerprint `pod_fp` and recorded the CA set `pod_cas`.
    fn member(name: &str, fp: Option<&str>, cas: Option<&str>) -> MemberView {
        MemberView {
            name: name.into(),
            created: Timestamp::UNIX_EPOCH,
            deleting: false,
            bootstrap: false,
            dormant: false,
            pending: false,
            memory: false,
            voter: true,
            version: "3.6.16".into(),
            recorded_pod_uid: None,
            service: None,
            pod: Some(PodView {
                uid: format!("pod-{name}"),
                ready: true,
                trust_bundle: fp.map(str::to_string),
                trusted_cas: cas.map(str::to_string),
                ..Default::default()
            }),
            data_lost: false,
            trust_bundle: fp.map(str::to_string),
            trusted_cas: cas.map(str::to_string),
            template_hash: String::new(),
            data_home: DataHome::Unknown,
            image_repository: None,
            max_learners: 1,
        }
    }

    /// The Secrets hold bundle `bundle` and a peer certificate issued by `leaf_ca`.
    fn trust(bundle: &[&str], leaf_ca: &[&str]) -> CaTrust {
        CaTrust {
            bundles: peer(bundle),
            presented: vec![Presented {
                bundle: Bundle::Peer,
                secret: "ns/c-peer".into(),
                origin: "spec.tls.peer.secretRef".into(),
                what: "peer certificate",
                anchors: set(leaf_ca),
            }],
            changed: None,
        }
    }

    fn verdict(members: &[MemberView], fp: &str, t: &CaTrust) -> Option<String> {
        let live: Vec<&MemberView> = members.iter().collect();
        unsafe_change(Some(fp), Some(t), &live)
    }

    #[test]
    fn a_ca_and_leaf_moved_to_a_new_ca_in_one_edit_is_refused_naming_the_secret_and_the_steps() {
        let members: Vec<MemberView> = ["c-a", "c-b", "c-c"]
            .iter()
            .map(|n| member(n, Some("fp-old"), Some("peer=aaaa")))
            .collect();
        let msg = verdict(&members, "fp-new", &trust(&["bbbb"], &["bbbb"])).expect("refused");
        for part in [
            "Secret ns/c-peer (spec.tls.peer.secretRef)",
            "issued by CA bbbb",
            "c-a, c-b, c-c do not trust",
            "loaded CA(s) aaaa",
            "no member is restarted",
            "both the old and the new CA",
            "then re-issue tls.crt from the new CA",
            "remove the old CA",
        ] {
            assert!(msg.contains(part), "{part:?} missing: {msg}");
        }
    }

    #[test]
    fn each_step_of_the_two_step_rotation_is_allowed() {
        let old: Vec<MemberView> = ["c-a", "c-b", "c-c"]
            .iter()
            .map(|n| member(n, Some("fp-a"), Some("peer=aaaa")))
            .collect();
        // 1. The new CA joins the bundle, the leaf is still the old CA's.
        assert_eq!(
            verdict(&old, "fp-ab", &trust(&["aaaa", "bbbb"], &["aaaa"])),
            None
        );
        // Half-way through that roll: restarted members trust both.
        let mut half = old.clone();
        half[0] = member("c-a", Some("fp-ab"), Some("peer=aaaa,bbbb"));
        assert_eq!(
            verdict(&half, "fp-ab", &trust(&["aaaa", "bbbb"], &["aaaa"])),
            None
        );
        // 2. Leaves re-issued from the new CA once every member trusts both: no roll, allowed.
        let both: Vec<MemberView> = ["c-a", "c-b", "c-c"]
            .iter()
            .map(|n| member(n, Some("fp-ab"), Some("peer=aaaa,bbbb")))
            .collect();
        assert_eq!(
            verdict(&both, "fp-ab", &trust(&["aaaa", "bbbb"], &["bbbb"])),
            None
        );
        // 3. The old CA leaves the bundle.
        assert_eq!(verdict(&both, "fp-b", &trust(&["bbbb"], &["bbbb"])), None);
    }

    #[test]
    fn switching_the_leaves_before_every_member_trusts_the_new_ca_is_refused() {
        // The roll of step 1 is half-way (c-b, c-c still trust only the old CA) when the leaves
        // move to the new CA.
        let mut members: Vec<MemberView> = ["c-a", "c-b", "c-c"]
            .iter()
            .map(|n| member(n, Some("fp-a"), Some("peer=aaaa")))
            .collect();
        members[0] = member("c-a", Some("fp-ab"), Some("peer=aaaa,bbbb"));
        let msg =
            verdict(&members, "fp-ab", &trust(&["aaaa", "bbbb"], &["bbbb"])).expect("refused");
        assert!(msg.contains("member(s) c-b, c-c do not trust"), "{msg}");
    }

    #[test]
    fn the_client_bundle_is_judged_by_the_operator_client_certificate() {
        let members = vec![member("c-a", Some("fp-a"), Some("peer=a1;client=c1"))];
        let mut t = trust(&["a1"], &["a1"]);
        t.bundles.client = set(&["c2"]);
        t.presented.push(Presented {
            bundle: Bundle::Client,
            secret: "ns/c-op".into(),
            origin: "spec.tls.client.operatorClientSecretRef".into(),
            what: "operator client certificate",
            anchors: set(&["c2"]),
        });
        let msg = verdict(&members, "fp-b", &t).expect("refused");
        assert!(
            msg.contains("Secret ns/c-op") && msg.contains("operator client"),
            "{msg}"
        );
        t.presented[1].anchors = set(&["c1"]);
        assert_eq!(verdict(&members, "fp-b", &t), None);
    }

    #[test]
    fn members_without_a_recorded_set_are_derived_from_their_fingerprint_or_not_judged() {
        let t = trust(&["bbbb"], &["bbbb"]);
        // Started with the current fingerprint, no set recorded: it trusts the current CAs.
        let current = member("c-a", Some("fp-new"), None);
        assert_eq!(
            running_set(&current, "fp-new", &t.bundles),
            Some(peer(&["bbbb"]))
        );
        // Nothing recorded at all (an older operator's member): taken to run the current one.
        assert_eq!(
            running_set(&member("c-a", None, None), "fp-new", &t.bundles),
            Some(peer(&["bbbb"]))
        );
        // Another fingerprint and no set, or a set recorded as unknown on takeover: not known,
        // so nothing is refused for it (it is rolled as before, not wedged).
        let older = member("c-b", Some("fp-old"), None);
        let unknown = member("c-c", Some(UNKNOWN), Some(UNKNOWN));
        assert_eq!(running_set(&older, "fp-new", &t.bundles), None);
        assert_eq!(running_set(&unknown, "fp-new", &t.bundles), None);
        assert_eq!(verdict(&[current, older, unknown], "fp-new", &t), None);
    }

    #[test]
    fn a_certificate_chaining_to_no_ca_of_the_bundle_is_left_to_the_secret_checks() {
        let members = vec![member("c-a", Some("fp-old"), Some("peer=aaaa"))];
        assert_eq!(verdict(&members, "fp-new", &trust(&["bbbb"], &[])), None);
    }

    #[test]
    fn members_without_a_running_pod_refuse_nothing() {
        let mut m = member("c-a", Some("fp-old"), Some("peer=aaaa"));
        m.pod = None;
        let mut pending = member("c-b", Some("fp-old"), Some("peer=aaaa"));
        pending.pending = true;
        assert_eq!(
            verdict(&[m, pending], "fp-new", &trust(&["bbbb"], &["bbbb"])),
            None
        );
    }

    #[test]
    fn a_member_running_the_current_bundle_without_a_recorded_set_records_it() {
        assert!(set_unrecorded(&member("c-a", Some("fp"), None), "fp"));
        assert!(!set_unrecorded(
            &member("c-a", Some("fp"), Some("peer=aaaa")),
            "fp"
        ));
        assert!(!set_unrecorded(&member("c-a", Some("old"), None), "fp"));
    }

    #[test]
    fn the_recorded_set_reads_back_and_anything_else_is_unknown() {
        let s = CaSet {
            peer: set(&["aa", "bb"]),
            client: set(&["cc"]),
        };
        assert_eq!(s.render(), "peer=aa,bb;client=cc");
        assert_eq!(CaSet::parse(&s.render()), Some(s));
        assert_eq!(CaSet::parse(UNKNOWN), None);
        assert_eq!(CaSet::parse("peer=zz"), None);
    }

    #[test]
    fn an_unrecorded_member_started_before_the_ca_changed_may_run_an_older_bundle() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let mut t = trust(&["bbbb"], &["bbbb"]);
        t.changed = Some(at(100));
        let mut m = member("c-a", None, None);
        let start = |m: &mut MemberView, s: Option<i64>| {
            m.pod.as_mut().unwrap().started = s.map(at);
        };
        start(&mut m, Some(50));
        assert!(started_before_ca_change(&m, Some(&t)));
        start(&mut m, Some(100));
        assert!(
            started_before_ca_change(&m, Some(&t)),
            "the same second is not after"
        );
        start(&mut m, Some(101));
        assert!(!started_before_ca_change(&m, Some(&t)));
        // Unknown times: not judged stale.
        start(&mut m, None);
        assert!(!started_before_ca_change(&m, Some(&t)));
        t.changed = None;
        start(&mut m, Some(50));
        assert!(!started_before_ca_change(&m, Some(&t)));
    }
}
