//! Online growth of a member's PVC: when `spec.storage.size` exceeds what the claim requests, the
//! claim's request is raised (the StorageClass permitting), and the storage provider expands the
//! volume under the running Pod; the member's `VolumeExpanded` condition says where that stands.
//! The condition appears with the first growth and then stays. Shared by the member controller
//! (which grows the claim) and the cluster's `VolumesExpanded` summary.
//!
//! Pure: no I/O, no controller's module.

use api::conditions::reason;
use api::quantity::to_bytes;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// What the member controller read about the claim.
#[derive(Clone, Debug, Default)]
pub struct ClaimFacts<'a> {
    pub pvc: &'a str,
    /// `spec.resources.requests.storage`.
    pub requested: Option<&'a Quantity>,
    /// `status.capacity.storage`.
    pub capacity: Option<&'a Quantity>,
    /// The claim's StorageClass, when it names one.
    pub class: Option<&'a str>,
    /// Whether that class allows expansion; `None` when it was not read (not needed, or not
    /// found).
    pub class_allows: Option<bool>,
    /// The member already has a `VolumeExpanded` condition.
    pub had_condition: bool,
}

/// What to do and what to report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Growth {
    /// Raise the claim's request to this size.
    pub request: Option<Quantity>,
    /// The `VolumeExpanded` condition: status, reason, message.
    pub condition: Option<(bool, &'static str, String)>,
    /// Nothing the operator watches will change the answer (a StorageClass edit): look again later.
    pub recheck: bool,
}

fn bytes(q: Option<&Quantity>) -> Option<i64> {
    q.and_then(to_bytes)
}

/// Whether the claim requests less than `want` (only then is its StorageClass read).
pub fn request_short(want: &Quantity, requested: Option<&Quantity>) -> bool {
    match (to_bytes(want), bytes(requested)) {
        (Some(w), Some(r)) => r < w,
        (Some(_), None) => true,
        _ => false,
    }
}

fn show(q: Option<&Quantity>) -> &str {
    q.map(|q| q.0.as_str()).unwrap_or("no size")
}

pub fn plan(want: &Quantity, f: &ClaimFacts) -> Growth {
    let Some(want_bytes) = to_bytes(want) else {
        return Growth::default();
    };
    let pvc = f.pvc;
    let size = &want.0;
    if request_short(want, f.requested) {
        let requested = show(f.requested);
        let refused = |message: String| Growth {
            request: None,
            condition: Some((false, reason::VOLUME_EXPANSION_NOT_SUPPORTED, message)),
            recheck: true,
        };
        return match (f.class, f.class_allows) {
            (Some(_), Some(true)) => Growth {
                request: Some(want.clone()),
                condition: Some((
                    false,
                    reason::VOLUME_EXPANDING,
                    format!(
                        "PVC {pvc} is being expanded from {requested} to {size} \
                         (spec.storage.size), online: the member keeps running"
                    ),
                )),
                recheck: false,
            },
            (Some(class), Some(false)) => refused(format!(
                "StorageClass {class} does not allow volume expansion (allowVolumeExpansion is \
                 not true), so PVC {pvc} stays at {requested} while spec.storage.size asks for \
                 {size}. If its provisioner can expand volumes, allow it (kubectl patch \
                 storageclass {class} -p '{{\"allowVolumeExpansion\": true}}') and the operator \
                 expands the PVC; members created from now on get {size}"
            )),
            (Some(class), None) => refused(format!(
                "StorageClass {class} of PVC {pvc} was not found, so the operator cannot tell \
                 whether it may expand the PVC from {requested} to {size} (spec.storage.size); \
                 members created from now on get {size}"
            )),
            (None, _) => refused(format!(
                "PVC {pvc} names no StorageClass, so it cannot be expanded from {requested} to \
                 {size} (spec.storage.size); members created from now on get {size}"
            )),
        };
    }
    match bytes(f.capacity) {
        Some(c) if c < want_bytes => Growth {
            request: None,
            condition: Some((
                false,
                reason::VOLUME_EXPANDING,
                format!(
                    "PVC {pvc} requests {size} and holds {}; the storage provider is expanding \
                     it online (kubectl describe pvc {pvc} shows its progress)",
                    show(f.capacity)
                ),
            )),
            recheck: false,
        },
        Some(_) if f.had_condition => Growth {
            request: None,
            condition: Some((
                true,
                reason::VOLUME_EXPANDED,
                format!(
                    "PVC {pvc} holds {}, as spec.storage.size asks",
                    show(f.capacity)
                ),
            )),
            recheck: false,
        },
        _ => Growth::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn an_unchanged_size_reports_nothing() {
        let (r, c) = (q("1Gi"), q("1Gi"));
        let f = ClaimFacts {
            pvc: "data-c-a",
            requested: Some(&r),
            capacity: Some(&c),
            ..Default::default()
        };
        assert_eq!(plan(&q("1073741824"), &f), Growth::default());
    }

    #[test]
    fn a_larger_size_raises_the_request_when_the_class_allows_it() {
        let (r, c) = (q("1Gi"), q("1Gi"));
        let f = ClaimFacts {
            pvc: "data-c-a",
            requested: Some(&r),
            capacity: Some(&c),
            class: Some("fast"),
            class_allows: Some(true),
            ..Default::default()
        };
        let g = plan(&q("2Gi"), &f);
        assert_eq!(g.request, Some(q("2Gi")));
        let (status, why, message) = g.condition.unwrap();
        assert!(!status);
        assert_eq!(why, reason::VOLUME_EXPANDING);
        assert!(message.contains("from 1Gi to 2Gi"), "{message}");
    }

    #[test]
    fn a_class_without_expansion_is_named_with_the_fix() {
        let r = q("1Gi");
        let f = ClaimFacts {
            pvc: "data-c-a",
            requested: Some(&r),
            capacity: Some(&r),
            class: Some("fixed"),
            class_allows: Some(false),
            ..Default::default()
        };
        let g = plan(&q("2Gi"), &f);
        assert_eq!(g.request, None);
        assert!(g.recheck);
        let (status, why, message) = g.condition.unwrap();
        assert!(!status);
        assert_eq!(why, reason::VOLUME_EXPANSION_NOT_SUPPORTED);
        assert!(
            message.contains("StorageClass fixed")
                && message.contains("kubectl patch storageclass fixed"),
            "{message}"
        );
        // A missing class, or none named, is said as such.
        let missing = plan(
            &q("2Gi"),
            &ClaimFacts {
                class_allows: None,
                ..f.clone()
            },
        );
        assert!(missing.condition.unwrap().2.contains("was not found"));
        let none = plan(&q("2Gi"), &ClaimFacts { class: None, ..f });
        assert!(none.condition.unwrap().2.contains("names no StorageClass"));
    }

    #[test]
    fn a_raised_request_waits_for_the_capacity_then_reports_done() {
        let (r, c) = (q("2Gi"), q("1Gi"));
        let mut f = ClaimFacts {
            pvc: "data-c-a",
            requested: Some(&r),
            capacity: Some(&c),
            class: Some("fast"),
            ..Default::default()
        };
        let g = plan(&q("2Gi"), &f);
        assert_eq!(g.request, None);
        assert_eq!(g.condition.unwrap().1, reason::VOLUME_EXPANDING);
        let grown = q("2Gi");
        f.capacity = Some(&grown);
        f.had_condition = true;
        let (status, why, message) = plan(&q("2Gi"), &f).condition.unwrap();
        assert!(status);
        assert_eq!(why, reason::VOLUME_EXPANDED);
        assert!(message.contains("holds 2Gi"), "{message}");
    }
}
