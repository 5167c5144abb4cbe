//! Where the test binaries are: the directory `tools/testbins/build.sh` fills, named by one
//! environment variable. Binaries are called by that path only, never looked up on `PATH`, so a
//! developer's own `kubectl` or `etcd` can never stand in for the pinned builds.
//!
//! Layout (see tools/testbins/build.sh): `<dir>/<part>/<binary>`, where a part is finished when it
//! holds a `.done` marker, and an optional part that cannot be built with the machine's Go records
//! why in `.failed` (line 1: the Go version, line 2: the reason) next to its `build.log`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::Error;

/// The one variable that names the test binaries' directory (set by the Makefile).
pub const TESTBINS_ENV: &str = "ETCD_OPERATOR_TESTBINS";

/// Which kube-apiserver build a control plane runs. kubectl, kube-controller-manager and
/// kube-scheduler always come from the current build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kubernetes {
    /// The build whose Go version matches the machine's toolchain (`<dir>/k8s`).
    #[default]
    Current,
    /// Kubernetes 1.29, the oldest minor the CRDs support (CEL `fieldPath`, `reason` and the
    /// quantity library), apiserver only (`<dir>/k8s-1.29`); best effort, see [`PartState`].
    V1_29,
}

impl Kubernetes {
    /// The testbins part holding this build's kube-apiserver.
    pub fn part(self) -> &'static str {
        match self {
            Kubernetes::Current => "k8s",
            Kubernetes::V1_29 => "k8s-1.29",
        }
    }
}

/// The part holding cert-manager's controller and cainjector (`controller`, `cainjector`).
pub const CERT_MANAGER: &str = "cert-manager";
/// The part holding the same cert-manager release's CRDs (`crd-*.yaml`).
pub const CERT_MANAGER_CRDS: &str = "cert-manager-crds";

/// Whether a part of the test binaries is usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartState {
    /// Built: `.done` is present.
    Built,
    /// An optional part the build script tried and recorded as unbuildable with this Go.
    Unbuildable {
        go_version: String,
        reason: String,
        build_log: PathBuf,
    },
    /// Neither built nor recorded as unbuildable (never built, or a build is in progress).
    Missing,
}

/// The directory of test binaries named by [`TESTBINS_ENV`].
#[derive(Clone, Debug)]
pub struct Testbins {
    dir: PathBuf,
}

impl Testbins {
    /// The directory from [`TESTBINS_ENV`]; an error that names `make testbins` when it is unset
    /// or not a directory.
    pub fn from_env() -> Result<Self, Error> {
        let dir = std::env::var_os(TESTBINS_ENV)
            .filter(|v| !v.is_empty())
            .ok_or(Error::TestbinsUnset)?;
        Self::at(PathBuf::from(dir))
    }

    /// The test binaries in `dir`.
    pub fn at(dir: PathBuf) -> Result<Self, Error> {
        if !dir.is_dir() {
            return Err(Error::TestbinsNotADirectory { dir });
        }
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `part` (`k8s`, `k8s-1.29`, `etcd-3.6`, ...) is built, recorded as unbuildable, or
    /// missing.
    pub fn part_state(&self, part: &str) -> PartState {
        let dir = self.dir.join(part);
        if dir.join(".done").is_file() {
            return PartState::Built;
        }
        match fs::read_to_string(dir.join(".failed")) {
            Ok(text) => {
                let mut lines = text.lines();
                let go_version = lines.next().unwrap_or_default().trim().to_string();
                let reason = lines.next().unwrap_or_default().trim().to_string();
                PartState::Unbuildable {
                    go_version,
                    reason,
                    build_log: dir.join("build.log"),
                }
            }
            Err(_) => PartState::Missing,
        }
    }

    /// The directory of `part`, checked to be a finished build.
    pub fn part_dir(&self, part: &str) -> Result<PathBuf, Error> {
        self.finished(part, "")
    }

    /// The path of `binary` in `part`, checked to be a finished build and executable.
    pub fn binary(&self, part: &str, binary: &str) -> Result<PathBuf, Error> {
        self.finished(part, binary)?;
        let missing = |reason: String| Error::BinaryMissing {
            dir: self.dir.clone(),
            part: part.to_string(),
            binary: binary.to_string(),
            reason,
        };
        let path = self.dir.join(part).join(binary);
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => Ok(path),
            Ok(_) => Err(missing(format!(
                "{} is not an executable file",
                path.display()
            ))),
            Err(e) => Err(missing(format!("{}: {e}", path.display()))),
        }
    }

    /// `<dir>/<part>` if the part is finished; `what` names the file wanted in the error.
    fn finished(&self, part: &str, what: &str) -> Result<PathBuf, Error> {
        let missing = |reason: String| Error::BinaryMissing {
            dir: self.dir.clone(),
            part: part.to_string(),
            binary: what.to_string(),
            reason,
        };
        match self.part_state(part) {
            PartState::Built => {}
            PartState::Unbuildable {
                go_version,
                reason,
                build_log,
            } => {
                return Err(missing(format!(
                    "recorded as not buildable with {go_version}: {reason}; see {}",
                    build_log.display()
                )))
            }
            PartState::Missing => {
                return Err(missing(format!(
                    "{part}/.done is absent: never built, or a build is still running"
                )))
            }
        }
        Ok(self.dir.join(part))
    }

    /// The version a part was built at (its `VERSION` file), e.g. `v1.37.1`.
    pub fn version(&self, part: &str) -> Option<String> {
        fs::read_to_string(self.dir.join(part).join("VERSION"))
            .ok()
            .map(|v| v.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbuildable_part_reports_go_version_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("k8s-1.29");
        fs::create_dir(&part).unwrap();
        fs::write(
            part.join(".failed"),
            "go1.26.8\nk8s.io/kubernetes/pkg/x: undefined: y\n",
        )
        .unwrap();
        let bins = Testbins::at(dir.path().to_path_buf()).unwrap();
        assert_eq!(
            bins.part_state("k8s-1.29"),
            PartState::Unbuildable {
                go_version: "go1.26.8".into(),
                reason: "k8s.io/kubernetes/pkg/x: undefined: y".into(),
                build_log: part.join("build.log"),
            }
        );
        let err = bins.binary("k8s-1.29", "kube-apiserver").unwrap_err();
        assert!(err.to_string().contains("make testbins"), "{err}");
    }

    #[test]
    fn part_without_done_marker_is_missing_even_if_the_binary_exists() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("etcd-3.6");
        fs::create_dir(&part).unwrap();
        fs::write(part.join("etcd"), "").unwrap();
        let bins = Testbins::at(dir.path().to_path_buf()).unwrap();
        assert_eq!(bins.part_state("etcd-3.6"), PartState::Missing);
        assert!(bins.binary("etcd-3.6", "etcd").is_err());
        fs::write(part.join(".done"), "").unwrap();
        fs::set_permissions(part.join("etcd"), fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(bins.binary("etcd-3.6", "etcd").unwrap(), part.join("etcd"));
    }
}
