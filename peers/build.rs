//! Reads the version of `dynamo-kv-router` this crate links from the workspace's
//! lockfile, so the adapter's hello (SPEC.md §15.2) reports the code actually built,
//! not a constant typed in. The manifest pins it with `=`, so every lockfile that
//! builds this crate (the workspace's, the fuzz workspace's) names the same version.

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    let candidates = ["../Cargo.lock", "fuzz/Cargo.lock", "../../Cargo.lock"];
    for relative in candidates {
        let path = std::path::Path::new(&manifest).join(relative);
        println!("cargo:rerun-if-changed={}", path.display());
        let Ok(lock) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut lines = lock.lines();
        while let Some(line) = lines.next() {
            if line == r#"name = "dynamo-kv-router""# {
                if let Some(version) = lines.next().and_then(|l| l.strip_prefix("version = ")) {
                    let version = version.trim_matches('"');
                    println!("cargo:rustc-env=KVROUTE_DYNAMO_KV_ROUTER_VERSION={version}");
                    return;
                }
            }
        }
    }
    panic!("no lockfile names dynamo-kv-router: cannot tell which version is linked");
}
