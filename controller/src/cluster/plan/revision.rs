//! What a member runs that only a new Pod changes, as one concept: a [`Revision`] of a kind
//! (the CA bundles' fingerprint, the etcd image repository, the template hash) is recorded on
//! the member (what it is told to run) and on its Pod (what the Pod started with), each kind
//! under its own annotation. A rollout brings every member to the [`Wanted`] revisions. Pure.

use api::labels;

use super::{MemberView, PodView};

/// A kind of revision a member runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Revision {
    /// The fingerprint of the CA bundles etcd loaded at start-up ([`crate::tls::trust_bundle`]).
    TrustBundle,
    /// The operator's `--etcd-image-repository` the member's image comes from.
    ImageRepository,
    /// The hash of the member's template ([`crate::template::hash`]).
    Template,
}

impl Revision {
    pub const ALL: [Revision; 3] = [
        Revision::TrustBundle,
        Revision::ImageRepository,
        Revision::Template,
    ];

    /// The annotation it is recorded under, on the member and on its Pod.
    pub fn annotation(self) -> &'static str {
        match self {
            Revision::TrustBundle => labels::TRUST_BUNDLE_ANNOTATION,
            Revision::ImageRepository => labels::IMAGE_REPOSITORY_ANNOTATION,
            Revision::Template => labels::TEMPLATE_HASH_ANNOTATION,
        }
    }

    /// What `m` is told to run: its member's record (a template is always known).
    pub fn told(self, m: &MemberView) -> Option<&str> {
        match self {
            Revision::TrustBundle => m.trust_bundle.as_deref(),
            Revision::ImageRepository => m.image_repository.as_deref(),
            Revision::Template => Some(&m.template_hash),
        }
    }

    /// What a Pod records it started with.
    pub fn started(self, p: &PodView) -> Option<&str> {
        match self {
            Revision::TrustBundle => p.trust_bundle.as_deref(),
            Revision::ImageRepository => p.image_repository.as_deref(),
            Revision::Template => p.template_hash.as_deref(),
        }
    }

    /// `m`'s Pod started with something else than it is to run. A member without a Pod (a new
    /// one, or one whose Pod is being created again) starts with what its member records. A
    /// Pod that records no trust bundle is taken to run another than `want` (and without a
    /// `want` there is none to run); a Pod without a template or repository record runs its
    /// member's (it is recorded, see [`super::Action::Record`]).
    pub fn pod_behind(self, m: &MemberView, want: Option<&str>) -> bool {
        let Some(p) = &m.pod else {
            return false;
        };
        match self {
            Revision::TrustBundle => want.is_some_and(|w| self.started(p) != Some(w)),
            Revision::ImageRepository | Revision::Template => self
                .started(p)
                .is_some_and(|started| Some(started) != self.told(m)),
        }
    }

    /// Whether `m` runs (or will start with) `want`.
    pub fn runs(self, m: &MemberView, want: &str) -> bool {
        self.told(m) == Some(want) && !self.pod_behind(m, Some(want))
    }

    /// `(members running want, members)` while some do not; members that never recorded this
    /// kind are taken to run it (they are recorded, see [`super::Action::Record`]).
    pub fn progress(self, want: Option<&str>, live: &[&MemberView]) -> Option<(i32, i32)> {
        let want = want?;
        let done = live
            .iter()
            .filter(|m| self.told(m).is_none() || self.runs(m, want))
            .count() as i32;
        let total = live.len() as i32;
        (done < total).then_some((done, total))
    }
}

/// The revisions every member is to run: the locked target's template, the trust bundle the
/// Secrets hold (none without TLS Secrets) and the operator's image repository (none: leave
/// them as they are).
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    pub template: &'a str,
    pub trust_bundle: Option<&'a str>,
    pub image_repository: Option<&'a str>,
}

impl Wanted<'_> {
    /// The revision of `kind` wanted, if any.
    pub fn of(&self, kind: Revision) -> Option<&str> {
        match kind {
            Revision::TrustBundle => self.trust_bundle,
            Revision::ImageRepository => self.image_repository,
            Revision::Template => Some(self.template),
        }
    }

    /// Whether `m` is told to run every wanted revision (its Pod may still run the old ones).
    pub fn told(&self, m: &MemberView) -> bool {
        Revision::ALL
            .iter()
            .all(|r| self.of(*r).is_none_or(|w| r.told(m) == Some(w)))
    }

    /// Whether `m`'s Pod runs an older revision of some kind than its member is told.
    pub fn pod_behind(&self, m: &MemberView) -> bool {
        Revision::ALL.iter().any(|r| r.pod_behind(m, self.of(*r)))
    }
}
