//! Which local files stand in for a container image, and which file a container's command names
//! in them.
//!
//! There is no image store: an image reference maps either to an OCI image layout (the operator's
//! own image, built by `make test-image`; unpacked by [`super::unpack`] and run with its
//! entrypoint, command, environment, user and working directory) or to a directory of executables
//! (the etcd builds in the testbins cache, the host's `/bin` tools), which becomes the container's
//! `PATH`. An etcd image holds what the official one holds (`etcd`, `etcdctl`, `etcdutl`) and
//! nothing else: no shell, `tar`, `mount`, `cat` or `ls`, so a command that would fail inside a
//! real member fails here too. Anything else fails the way a missing image or binary fails on a real node, loudly and
//! with the known mappings in the message.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{oci, unpack};

/// Registries the official etcd images are published under.
pub const DEFAULT_ETCD_REPOSITORIES: &[&str] = &[
    "quay.io/coreos/etcd",
    "gcr.io/etcd-development/etcd",
    "registry.k8s.io/etcd",
];

/// Where image directories appear inside containers.
pub const IMAGE_BIN: &str = "/usr/local/bin";

/// Image names (last path segment, any registry, any tag) served by the host's own tools.
pub const DEFAULT_TOOLS_IMAGES: &[&str] = &["busybox", "test-tools"];

/// `PATH` of the tools image: the host's standard directories.
pub const TOOLS_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// One mapping from image references to a directory.
#[derive(Clone, Debug)]
pub enum ImageRule {
    /// `<repository>:v<minor>.*` (or `<minor>.*`) for any of `repositories`.
    Etcd {
        repositories: Vec<String>,
        minor: String,
        dir: PathBuf,
    },
    /// One image, by full reference; a reference without a tag matches every tag of that repository.
    Exact {
        image: String,
        dir: PathBuf,
        entrypoint: Vec<String>,
        cmd: Vec<String>,
    },
    /// Images named like the tools images: the host's `/bin` and friends.
    Tools { names: Vec<String> },
    /// One image, by full reference (a reference without a tag matches every tag), from the OCI
    /// image layout `layout` (its manifest tagged `tag`, or its only one), unpacked under `cache`.
    Oci {
        image: String,
        layout: PathBuf,
        tag: Option<String>,
        cache: PathBuf,
    },
}

/// What a container image resolved to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedImage {
    /// The reference as written in the Pod.
    pub image: String,
    /// The directories searched for commands, in order (the container's `PATH`).
    pub path: Vec<PathBuf>,
    /// The image's ENTRYPOINT and CMD, used when the container sets no `command` / `args`.
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// Whether absolute paths name host files (the tools image) or are looked up by file name in
    /// `path` (`/usr/local/bin/etcd` in the etcd image).
    pub host_paths: bool,
    /// Where each directory of `path` is bind-mounted inside the container, in the same order
    /// ([`IMAGE_BIN`], where the etcd images keep their binaries, then [`IMAGE_TOOLS`]); empty for
    /// the tools image, whose files are the host's. Mounts, not the host paths: the testbins
    /// cache may sit under a directory (`/root`) that the container's user cannot traverse.
    pub mount_at: Vec<PathBuf>,
    /// `imageID` for the container status.
    pub image_id: String,
    /// An OCI image's unpacked root filesystem: absolute commands name files in it.
    pub rootfs: Option<PathBuf>,
    /// The image's `Env`, under the container's own.
    pub env: Vec<(String, String)>,
    /// The image's `User` as `(uid, gid)`, for a container whose securityContext names none.
    pub user: Option<(u32, u32)>,
    /// The image's `WorkingDir`, for a container that sets no `workingDir`.
    pub working_dir: Option<String>,
    /// An OCI image's other files, `(host path, path in the container)`, bind-mounted read-only
    /// like `path`: directories holding files (`/etc/ssl/certs`), `/etc`'s own files one by one
    /// (`/etc/passwd`: the rest of `/etc` stays the Pod's), and the working directory.
    pub extra_mounts: Vec<(PathBuf, PathBuf)>,
}

impl ResolvedImage {
    /// The container's `PATH`.
    pub fn path_env(&self) -> String {
        if let Some((_, path)) = self.env.iter().find(|(k, _)| k == "PATH") {
            return path.clone();
        }
        let dirs = if self.mount_at.is_empty() {
            &self.path
        } else {
            &self.mount_at
        };
        dirs.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    /// Where a file found by [`resolve_command`] is seen inside the container.
    pub fn in_container(&self, host: &Path) -> PathBuf {
        if let Some(rel) = self.rootfs.as_ref().and_then(|r| host.strip_prefix(r).ok()) {
            return Path::new("/").join(rel);
        }
        let mounted = self
            .path
            .iter()
            .zip(&self.mount_at)
            .find(|(dir, _)| host.parent() == Some(dir.as_path()));
        match (mounted, host.file_name()) {
            (Some((_, at)), Some(name)) => at.join(name),
            _ => host.to_path_buf(),
        }
    }

    /// `(host path, mount point)` of every image directory (and file).
    pub fn mounts(&self) -> impl Iterator<Item = (&PathBuf, &PathBuf)> {
        self.path
            .iter()
            .zip(&self.mount_at)
            .chain(self.extra_mounts.iter().map(|(host, at)| (host, at)))
    }

    /// `HOME` for `uid`: its home in the image's `/etc/passwd`, else `/root` for root and `/`.
    pub fn home(&self, uid: u32) -> String {
        self.rootfs
            .as_ref()
            .and_then(|r| unpack::image_home(r, uid))
            .unwrap_or_else(|| if uid == 0 { "/root" } else { "/" }.to_string())
    }
}

/// The image table of one pod runner.
#[derive(Clone, Debug, Default)]
pub struct ImageMap {
    rules: Vec<ImageRule>,
}

/// `[registry/]path[:tag][@digest]` split into repository and tag (either may be empty).
pub fn split_reference(image: &str) -> (&str, &str) {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_slash = without_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match without_digest[last_slash..].rfind(':') {
        Some(colon) => (
            &without_digest[..last_slash + colon],
            &without_digest[last_slash + colon + 1..],
        ),
        None => (without_digest, ""),
    }
}

/// `docker.io/library/busybox` and `busybox` are the same repository.
fn normalize_repository(repository: &str) -> &str {
    repository
        .strip_prefix("docker.io/library/")
        .or_else(|| repository.strip_prefix("docker.io/"))
        .or_else(|| repository.strip_prefix("index.docker.io/library/"))
        .unwrap_or(repository)
}

/// Whether `tag` is `v3.6`, `v3.6.16`, `3.6.16-0`, ... for `minor` `3.6`.
fn tag_is_minor(tag: &str, minor: &str) -> bool {
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    match tag.strip_prefix(minor) {
        Some(rest) => rest.is_empty() || rest.starts_with('.') || rest.starts_with('-'),
        None => false,
    }
}

impl ImageMap {
    pub fn new(rules: Vec<ImageRule>) -> Self {
        Self { rules }
    }

    pub fn rules(&self) -> &[ImageRule] {
        &self.rules
    }

    /// The directory standing in for `image`, or a message naming the image and every mapping.
    pub fn resolve(&self, image: &str) -> Result<ResolvedImage, String> {
        let (repository, tag) = split_reference(image);
        let repository = normalize_repository(repository);
        for rule in &self.rules {
            match rule {
                ImageRule::Etcd {
                    repositories,
                    minor,
                    dir,
                } => {
                    if repositories
                        .iter()
                        .any(|r| normalize_repository(r) == repository)
                        && tag_is_minor(tag, minor)
                    {
                        return Ok(ResolvedImage {
                            image: image.to_string(),
                            path: vec![dir.clone()],
                            entrypoint: Vec::new(),
                            // The published etcd images: `CMD ["/usr/local/bin/etcd"]`.
                            cmd: vec!["/usr/local/bin/etcd".to_string()],
                            host_paths: false,
                            mount_at: vec![PathBuf::from(IMAGE_BIN)],
                            image_id: format!("local://{}", dir.display()),
                            ..ResolvedImage::default()
                        });
                    }
                }
                ImageRule::Exact {
                    image: wanted,
                    dir,
                    entrypoint,
                    cmd,
                } => {
                    let (wanted_repository, wanted_tag) = split_reference(wanted);
                    if normalize_repository(wanted_repository) == repository
                        && (wanted_tag.is_empty() || wanted_tag == tag)
                    {
                        return Ok(ResolvedImage {
                            image: image.to_string(),
                            path: vec![dir.clone()],
                            entrypoint: entrypoint.clone(),
                            cmd: cmd.clone(),
                            host_paths: false,
                            mount_at: vec![PathBuf::from(IMAGE_BIN)],
                            image_id: format!("local://{}", dir.display()),
                            ..ResolvedImage::default()
                        });
                    }
                }
                ImageRule::Tools { names } => {
                    let name = repository.rsplit('/').next().unwrap_or(repository);
                    if names.iter().any(|n| n == name) {
                        return Ok(ResolvedImage {
                            image: image.to_string(),
                            path: TOOLS_PATH.iter().map(PathBuf::from).collect(),
                            entrypoint: Vec::new(),
                            cmd: vec!["sh".to_string()],
                            host_paths: true,
                            mount_at: Vec::new(),
                            image_id: "local:///bin".to_string(),
                            ..ResolvedImage::default()
                        });
                    }
                }
                ImageRule::Oci {
                    image: wanted,
                    layout,
                    tag: layout_tag,
                    cache,
                } => {
                    let (wanted_repository, wanted_tag) = split_reference(wanted);
                    if normalize_repository(wanted_repository) == repository
                        && (wanted_tag.is_empty() || wanted_tag == tag)
                    {
                        return oci::resolve(image, layout, layout_tag.as_deref(), cache);
                    }
                }
            }
        }
        Err(format!(
            "the pod runner has no local stand-in for image {image:?}; it maps {}",
            self.describe()
        ))
    }

    /// Every mapping, for messages and docs.
    pub fn describe(&self) -> String {
        self.rules
            .iter()
            .map(|rule| match rule {
                ImageRule::Etcd {
                    repositories,
                    minor,
                    dir,
                } => format!(
                    "{{{}}}:v{minor}.* -> {} (etcd, etcdctl, etcdutl only)",
                    repositories.join(","),
                    dir.display(),
                ),
                ImageRule::Exact { image, dir, .. } => {
                    format!("{image} -> {}", dir.display())
                }
                ImageRule::Tools { names } => {
                    format!("{{{}}} -> host {}", names.join(","), TOOLS_PATH.join(":"))
                }
                ImageRule::Oci { image, layout, .. } => {
                    format!("{image} -> OCI image layout {}", layout.display())
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

pub(super) fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The file `program` (a container's `command[0]`) runs in `image`: looked up on the image's
/// `PATH`; an absolute path is a host file in the tools image and the same file name in the
/// image's directory otherwise (`/usr/local/bin/etcd` in the etcd image).
pub fn resolve_command(image: &ResolvedImage, program: &str) -> Result<PathBuf, String> {
    let not_found = || {
        let dirs = image
            .path
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let mounted = image
            .mount_at
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        match (&image.rootfs, image.mount_at.is_empty()) {
            (Some(rootfs), _) => format!(
                "exec: {program:?}: executable file not found in image {} (unpacked at {}; $PATH={}, of which the image has {mounted})",
                image.image,
                rootfs.display(),
                image.path_env()
            ),
            (None, false) => format!(
                "exec: {program:?}: executable file not found in $PATH of image {} (its files are {dirs}, mounted at {mounted})",
                image.image
            ),
            (None, true) => format!(
                "exec: {program:?}: executable file not found in $PATH of image {} ({dirs})",
                image.image
            ),
        }
    };
    if program.is_empty() {
        return Err(not_found());
    }
    if let Some(rootfs) = &image.rootfs {
        // An OCI image: an absolute command is that file of the image, a bare name is looked up
        // on the image's `PATH` (the directories mounted from it).
        let candidates: Vec<PathBuf> = if program.starts_with('/') {
            unpack::inside(rootfs, program).into_iter().collect()
        } else if program.contains('/') {
            Vec::new()
        } else {
            image.path.iter().map(|dir| dir.join(program)).collect()
        };
        return candidates
            .into_iter()
            .find(|p| oci::is_executable_in(rootfs, p))
            .ok_or_else(not_found);
    }
    if program.contains('/') {
        if image.host_paths {
            let path = PathBuf::from(program);
            return if path.is_absolute() && is_executable(&path) {
                Ok(path)
            } else {
                Err(not_found())
            };
        }
        let name = program.rsplit('/').next().unwrap_or(program);
        return image
            .path
            .iter()
            .map(|dir| dir.join(name))
            .find(|p| !name.is_empty() && is_executable(p))
            .ok_or_else(not_found);
    }
    image
        .path
        .iter()
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
        .ok_or_else(not_found)
}

/// The argv a container runs: Kubernetes' rule for `command`/`args` against the image's
/// ENTRYPOINT/CMD.
pub fn container_argv(image: &ResolvedImage, command: &[String], args: &[String]) -> Vec<String> {
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => image.entrypoint.iter().chain(args).cloned().collect(),
        (true, true) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(dir: &Path) -> ImageMap {
        ImageMap::new(vec![
            ImageRule::Etcd {
                repositories: DEFAULT_ETCD_REPOSITORIES
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                minor: "3.6".into(),
                dir: dir.join("etcd-3.6"),
            },
            ImageRule::Etcd {
                repositories: DEFAULT_ETCD_REPOSITORIES
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                minor: "3.5".into(),
                dir: dir.join("etcd-3.5"),
            },
            ImageRule::Exact {
                image: "etcd-operator:test".into(),
                dir: dir.join("debug"),
                entrypoint: vec!["etcd-operator".into()],
                cmd: vec![],
            },
            ImageRule::Tools {
                names: vec!["busybox".into()],
            },
        ])
    }

    #[test]
    fn splits_references_with_registry_ports_and_digests() {
        assert_eq!(
            split_reference("quay.io/coreos/etcd:v3.6.1"),
            ("quay.io/coreos/etcd", "v3.6.1")
        );
        assert_eq!(
            split_reference("localhost:5000/etcd@sha256:abc"),
            ("localhost:5000/etcd", "")
        );
        assert_eq!(
            split_reference("localhost:5000/etcd:v3.5.0@sha256:abc"),
            ("localhost:5000/etcd", "v3.5.0")
        );
        assert_eq!(split_reference("busybox"), ("busybox", ""));
    }

    #[test]
    fn etcd_minor_tags_map_to_their_build() {
        let m = map(Path::new("/bins"));
        let r = m.resolve("quay.io/coreos/etcd:v3.6.16").unwrap();
        assert_eq!(r.path, vec![PathBuf::from("/bins/etcd-3.6")]);
        let r = m.resolve("registry.k8s.io/etcd:3.5.21-0").unwrap();
        assert_eq!(r.path, vec![PathBuf::from("/bins/etcd-3.5")]);
        assert!(m.resolve("quay.io/coreos/etcd:v3.60.0").is_err());
        assert!(m.resolve("quay.io/coreos/etcd:v3.4.30").is_err());
        assert!(m.resolve("example.com/etcd:v3.6.0").is_err());
    }

    #[test]
    fn unknown_image_message_names_the_image_and_the_mappings() {
        let err = map(Path::new("/bins")).resolve("nginx:1.27").unwrap_err();
        assert!(err.contains("\"nginx:1.27\""), "{err}");
        assert!(err.contains("etcd-operator:test -> /bins/debug"), "{err}");
        assert!(err.contains("quay.io/coreos/etcd"), "{err}");
    }

    #[test]
    fn operator_and_tools_images() {
        let m = map(Path::new("/bins"));
        assert!(m.resolve("etcd-operator:test").is_ok());
        assert!(m.resolve("etcd-operator:other").is_err());
        let tools = m.resolve("docker.io/library/busybox:1.36").unwrap();
        assert!(tools.host_paths);
        assert!(m.resolve("busybox").is_ok());
    }

    #[test]
    fn commands_resolve_on_the_image_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("etcd-3.6");
        std::fs::create_dir(&bin).unwrap();
        for name in ["etcd", "etcdctl"] {
            std::fs::write(bin.join(name), "").unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let image = map(dir.path())
            .resolve("quay.io/coreos/etcd:v3.6.0")
            .unwrap();
        assert_eq!(resolve_command(&image, "etcd").unwrap(), bin.join("etcd"));
        assert_eq!(
            resolve_command(&image, "/usr/local/bin/etcdctl").unwrap(),
            bin.join("etcdctl")
        );
        let err = resolve_command(&image, "/bin/sh").unwrap_err();
        assert!(err.contains("\"/bin/sh\""), "{err}");
        assert!(resolve_command(&image, "sh").is_err());

        // The official images hold no shell or tools: what a runbook runs inside a real member
        // fails here as there.
        for tool in ["sh", "/bin/sh", "tar", "mount", "cat", "ls"] {
            let err = resolve_command(&image, tool).unwrap_err();
            assert!(err.contains("executable file not found"), "{tool}: {err}");
        }
        assert_eq!(image.path_env(), "/usr/local/bin");

        let tools = map(dir.path()).resolve("busybox").unwrap();
        assert!(resolve_command(&tools, "sh").is_ok());
        assert!(resolve_command(&tools, "/bin/sh").is_ok());
        assert!(resolve_command(&tools, "/bin/no-such-tool").is_err());
    }

    #[test]
    fn argv_follows_the_entrypoint_and_cmd_rules() {
        let image = ResolvedImage {
            image: "x".into(),
            path: vec![],
            entrypoint: vec!["ep".into()],
            cmd: vec!["c1".into()],
            host_paths: false,
            mount_at: Vec::new(),
            image_id: String::new(),
            ..ResolvedImage::default()
        };
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(container_argv(&image, &[], &[]), s(&["ep", "c1"]));
        assert_eq!(container_argv(&image, &[], &s(&["a"])), s(&["ep", "a"]));
        assert_eq!(container_argv(&image, &s(&["x"]), &[]), s(&["x"]));
        assert_eq!(
            container_argv(&image, &s(&["x"]), &s(&["a"])),
            s(&["x", "a"])
        );
    }
}
