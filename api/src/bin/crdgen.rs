//! Writes the CRDs generated from the API types into the chart.
//!
//! `crdgen [DIR]` (default `charts/etcd-operator/files/crds`) writes one file per CRD;
//! `crdgen --stdout` prints them as one multi-document stream for `kubectl apply -f -`.

use std::path::PathBuf;
use std::process::ExitCode;

const DEFAULT_DIR: &str = "charts/etcd-operator/files/crds";

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let mut stream = String::new();
    let dir = PathBuf::from(arg.clone().unwrap_or_else(|| DEFAULT_DIR.to_string()));
    let to_stdout = arg.as_deref() == Some("--stdout");
    if !to_stdout {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("crdgen: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    for crd in api::crd::all() {
        let yaml = match api::crd::to_yaml(&crd) {
            Ok(y) => y,
            Err(e) => {
                eprintln!("crdgen: cannot render {}: {e}", api::crd::file_name(&crd));
                return ExitCode::FAILURE;
            }
        };
        if to_stdout {
            stream.push_str("---\n");
            stream.push_str(&yaml);
        } else {
            let path = dir.join(api::crd::file_name(&crd));
            if let Err(e) = std::fs::write(&path, yaml) {
                eprintln!("crdgen: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}", path.display());
        }
    }
    if to_stdout {
        print!("{stream}");
    }
    ExitCode::SUCCESS
}
