//! The operator image itself, as `make test-image` builds it (tools/image/build.sh --test; the e2e
//! suites run their operator Pods and Jobs from the same layout): unpacked the way the pod runner
//! unpacks it, its file layout, user, entrypoint and environment are the Dockerfile's, its three
//! binaries (the controller, the webhook, the `kubectl etcd` plugin) are static executables (no ELF interpreter: nothing in the image could load one) and
//! run from the unpacked root filesystem as the image's user. No control plane: seconds.
//!
//! The release image (`make image`) is the same layout with release binaries; the tests check
//! the one they run.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tests::install::IMAGE_REPOSITORY;
use tests::podrunner::images::{resolve_command, ImageMap, ImageRule};
use tests::podrunner::test_image_layout;
use tests::podrunner::unpack::{self, Unpacked};

const ENTRYPOINT: &str = "/usr/local/bin/etcd-operator";
const WEBHOOK: &str = "/usr/local/bin/etcd-operator-webhook";
const PLUGIN: &str = "/usr/local/bin/kubectl-etcd";
const NONROOT: u32 = 65532;

/// Where this binary unpacks the image: not the runner's cache under the target directory, which
/// may sit under a directory (`/root`) the image's user cannot traverse. `.ci/run` clears
/// `$TMPDIR/etcd-operator-tests`; digests unused for a day are pruned on the next unpack.
fn cache_dir() -> PathBuf {
    let dir = std::env::temp_dir()
        .join("etcd-operator-tests")
        .join("image-test");
    fs::create_dir_all(&dir).expect("creating the unpack directory");
    for d in [dir.parent().expect("parent"), dir.as_path()] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

/// The test image unpacked the way the pod runner unpacks it, once per test binary.
fn unpacked() -> (PathBuf, Unpacked) {
    static IMAGE: std::sync::OnceLock<Unpacked> = std::sync::OnceLock::new();
    let cache = cache_dir();
    let image = IMAGE.get_or_init(|| {
        let layout = test_image_layout();
        assert!(
            layout.join("index.json").is_file(),
            "no OCI image layout at {}: build it with `make test-image` (bash tools/image/build.sh --test)",
            layout.display()
        );
        unpack::unpack_cached(&layout, None, &cache)
            .unwrap_or_else(|e| panic!("unpacking {}: {e}", layout.display()))
    });
    (cache, image.clone())
}

fn file(rootfs: &Path, path: &str) -> PathBuf {
    unpack::inside(rootfs, path).expect("path inside the image")
}

/// The Dockerfile's final-stage instruction `name`'s argument text.
fn dockerfile(name: &str) -> Vec<String> {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Dockerfile"))
        .expect("reading the Dockerfile");
    let last_stage = text.rsplit("\nFROM ").next().unwrap_or(&text);
    last_stage
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{name} ")))
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn config_is_the_dockerfiles() {
    let (_cache, image) = unpacked();
    let config = &image.config;
    assert_eq!(config.entrypoint, [ENTRYPOINT]);
    assert!(config.cmd.is_empty(), "{:?}", config.cmd);
    assert_eq!(config.user, format!("{NONROOT}:{NONROOT}"));
    assert_eq!(config.working_dir, "/home/nonroot");
    let env: Vec<String> = config.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert!(
        env.contains(&"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".to_string()),
        "{env:?}"
    );
    assert!(image.digest.starts_with("sha256:"), "{}", image.digest);

    // The Dockerfile's image (for users with a daemon) has the same user, directory, environment
    // and entrypoint.
    assert_eq!(dockerfile("USER"), [config.user.as_str()]);
    assert_eq!(dockerfile("WORKDIR"), [config.working_dir.as_str()]);
    assert_eq!(dockerfile("ENTRYPOINT"), [format!("[\"{ENTRYPOINT}\"]")]);
    let docker_env: Vec<String> = dockerfile("ENV")
        .iter()
        .flat_map(|e| e.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert_eq!(docker_env, env);
}

#[test]
fn layout_is_distroless_nonroot_with_the_three_binaries() {
    let (_cache, image) = unpacked();
    let root = &image.rootfs;
    for (path, mode, uid) in [
        (ENTRYPOINT, 0o755, 0),
        (WEBHOOK, 0o755, 0),
        (PLUGIN, 0o755, 0),
        ("/etc/passwd", 0o644, 0),
        ("/etc/group", 0o644, 0),
        ("/etc/ssl/certs/ca-certificates.crt", 0o644, 0),
        ("/home/nonroot", 0o700, NONROOT),
        ("/root", 0o700, 0),
        ("/tmp", 0o1777, 0),
    ] {
        let meta = fs::symlink_metadata(file(root, path))
            .unwrap_or_else(|e| panic!("{path} in the image: {e}"));
        assert_eq!(meta.mode() & 0o7777, mode, "mode of {path}");
        assert_eq!((meta.uid(), meta.gid()), (uid, uid), "owner of {path}");
    }
    let passwd = fs::read_to_string(file(root, "/etc/passwd")).expect("passwd");
    assert!(
        passwd
            .lines()
            .any(|l| l == "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"),
        "{passwd}"
    );
    let group = fs::read_to_string(file(root, "/etc/group")).expect("group");
    assert!(group.lines().any(|l| l == "nonroot:x:65532:"), "{group}");
    let ca = fs::read_to_string(file(root, "/etc/ssl/certs/ca-certificates.crt")).expect("ca");
    assert!(
        ca.matches("-----BEGIN CERTIFICATE-----").count() > 50,
        "the CA bundle holds {} certificates",
        ca.matches("-----BEGIN CERTIFICATE-----").count()
    );
    // Nothing else: no shell, no libc, no package manager.
    let mut files = Vec::new();
    walk(root, root, &mut files);
    files.sort();
    assert_eq!(
        files,
        [
            "/etc/group",
            "/etc/passwd",
            "/etc/ssl/certs/ca-certificates.crt",
            ENTRYPOINT,
            WEBHOOK,
            PLUGIN,
        ]
    );
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path == root.join(".unpacked") {
            continue;
        }
        if entry.file_type().expect("file type").is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).expect("inside the root");
            out.push(format!("/{}", rel.display()));
        }
    }
}

/// `PT_INTERP` among an ELF64 little-endian executable's program headers, or why it is not one.
fn has_interpreter(bytes: &[u8]) -> Result<bool, String> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err(format!(
            "ELF class {} data {}, not 64-bit LE",
            bytes[4], bytes[5]
        ));
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let e_type = u16_at(16);
    if e_type != 2 && e_type != 3 {
        return Err(format!("ELF type {e_type}, not an executable"));
    }
    let phoff = u64::from_le_bytes(bytes[32..40].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .map(|o| {
            bytes
                .get(o..o + 4)
                .map(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) == 3)
                .ok_or_else(|| "program header past the end".to_string())
        })
        .try_fold(false, |any, interp| interp.map(|i| any || i))
}

#[test]
fn binaries_are_static_executables() {
    let (_cache, image) = unpacked();
    for bin in [ENTRYPOINT, WEBHOOK, PLUGIN] {
        let bytes = fs::read(file(&image.rootfs, bin)).expect("reading the binary");
        let interp = has_interpreter(&bytes).unwrap_or_else(|e| panic!("{bin}: {e}"));
        assert!(
            !interp,
            "{bin} has an ELF interpreter (PT_INTERP): it is dynamically linked and cannot start in an image without libc"
        );
    }
    // The check itself: a dynamically linked host binary has one.
    let host = fs::read("/bin/sh").expect("/bin/sh");
    assert_eq!(has_interpreter(&host), Ok(true));
}

/// Run `bin args` from the unpacked image as the image's user, with only the image's environment
/// and working directory.
fn run(image: &Unpacked, bin: &str, args: &[&str]) -> String {
    let (uid, gid) = unpack::image_user(&image.rootfs, &image.config.user).expect("image user");
    let mut cmd = Command::new(file(&image.rootfs, bin));
    cmd.args(args)
        .env_clear()
        .envs(image.config.env.iter().map(|(k, v)| (k, v)))
        .current_dir(file(&image.rootfs, &image.config.working_dir));
    if nix::unistd::geteuid().is_root() {
        cmd.uid(uid).gid(gid);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {bin} {args:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn every_binary_runs_from_the_image() {
    let (_cache, image) = unpacked();
    let version = env!("CARGO_PKG_VERSION");
    for (bin, name) in [
        (ENTRYPOINT, "etcd-operator"),
        (WEBHOOK, "etcd-operator-webhook"),
        (PLUGIN, "kubectl-etcd"),
    ] {
        assert_eq!(
            run(&image, bin, &["--version"]).trim(),
            format!("{name} {version}")
        );
        let help = run(&image, bin, &["--help"]);
        assert!(help.contains("Usage:"), "{bin} --help:\n{help}");
    }
    // The agent's subcommands are in the entrypoint (the snapshot, restore and verify Jobs run
    // them with the image's entrypoint and their own args).
    let help = run(&image, ENTRYPOINT, &["--help"]);
    assert!(help.contains("snapshot-agent"), "{help}");
    // The plugin, for `kubectl exec` into the operator's Pod or `kubectl cp` out of the image.
    let help = run(&image, PLUGIN, &["--help"]);
    for command in ["status", "snapshot", "recover", "defrag", "etcdctl"] {
        assert!(help.contains(&format!("  {command} ")), "{command}: {help}");
    }
}

#[test]
fn the_pod_runner_resolves_the_chart_commands_in_the_image() {
    let (cache, _image) = unpacked();
    let map = ImageMap::new(vec![ImageRule::Oci {
        image: IMAGE_REPOSITORY.into(),
        layout: test_image_layout(),
        tag: None,
        cache,
    }]);
    let resolved = map
        .resolve(&format!("{IMAGE_REPOSITORY}:v0.1.0"))
        .expect("the chart's image resolves");
    assert_eq!(resolved.user, Some((NONROOT, NONROOT)));
    assert_eq!(resolved.working_dir.as_deref(), Some("/home/nonroot"));
    assert_eq!(resolved.entrypoint, [ENTRYPOINT]);
    // The entrypoint, the webhook Deployment's `command`, and a bare name on the image's PATH.
    for (program, want) in [
        (ENTRYPOINT, ENTRYPOINT),
        (WEBHOOK, WEBHOOK),
        ("etcd-operator", ENTRYPOINT),
    ] {
        let host = resolve_command(&resolved, program).expect(program);
        assert_eq!(resolved.in_container(&host), Path::new(want), "{program}");
    }
    for missing in ["/bin/sh", "sh", "/usr/bin/etcd-operator"] {
        let err = resolve_command(&resolved, missing).expect_err(missing);
        assert!(err.contains("executable file not found in image"), "{err}");
    }
    let mounts: Vec<String> = resolved
        .mounts()
        .map(|(_, at)| at.display().to_string())
        .collect();
    for want in [
        "/usr/local/bin",
        "/etc/ssl/certs",
        "/etc/passwd",
        "/home/nonroot",
    ] {
        assert!(mounts.iter().any(|m| m == want), "{want} not in {mounts:?}");
    }
    assert!(
        !mounts.iter().any(|m| m == "/tmp" || m == "/etc"),
        "{mounts:?}"
    );
}
